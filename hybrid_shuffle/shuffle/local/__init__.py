"""The executor-local shuffle service (the default): partitions stay in their producer's
executor actor.  See ``service``."""
