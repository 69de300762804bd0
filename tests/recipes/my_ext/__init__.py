"""A user's own package of flowgrpo extensions, kept outside flowgrpo (tests/recipes).

:mod:`my_ext.plugins` holds one extension per recipe of docs/EXTENDING.md; the recipe tests
register them from Python, by dotted path (``my_ext.plugins:median_baseline``) in a config and
by naming the plugin :mod:`my_ext.registered` (which registers them on import) in ``plugins:``.
A dotted path names a module inside a package (the part before the colon must contain a dot),
which is why this is a package and not a single ``my_ext.py``.
"""
