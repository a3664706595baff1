"""The external partition store service ("external"): partitions are held by one store
actor per Ray node instead of by the executors, so they outlive their producer's
executor.  See ``service``."""
