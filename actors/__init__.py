"""Ray actor classes, installed as ``hybrid_shuffle.actors``.

This folder sits at the top of the repository but is only importable under its
installed name: importing it as a bare ``actors`` (say, from the repository root)
would create a second copy of every actor class, which breaks ``isinstance`` and
Ray's pickling of actor handles.  See docs/guide/development.md, "Layout".
"""

if __name__ != "hybrid_shuffle.actors":  # pragma: no cover - guard only
    raise ImportError(
        "import the actors as 'hybrid_shuffle.actors' (pip install -e . maps the folder there), "
        "not as a top-level 'actors' package"
    )
