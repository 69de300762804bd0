"""A user's own package of flowgrpo extensions, kept outside flowgrpo (tests/recipes).

:mod:`my_ext.plugins` holds one extension per recipe of docs/ARCHITECTURE.md; the recipe tests
register them from Python and by dotted path (``my_ext.plugins:median_baseline``) in a config.
A dotted path names a module inside a package (the part before the colon must contain a dot),
which is why this is a package and not a single ``my_ext.py``.
"""
