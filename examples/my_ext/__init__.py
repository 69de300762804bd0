"""An example flowgrpo extension package (docs/USAGE.md, "Your own problems and rewards", and
the recipes of docs/EXTENDING.md). Put ``examples`` on ``PYTHONPATH`` to import it.

``my_ext.rewards`` holds a plain reward function, named in a config by its dotted path;
``my_ext.plugin`` registers things when imported (list it under ``plugins:``);
``my_ext.recipes`` holds one extension per recipe of docs/EXTENDING.md (the recipe tests run
them) and ``my_ext.registered`` is the plugin that registers them on import. A dotted path names
a module inside a package (the part before the colon must contain a dot), which is why this is a
package and not a single ``my_ext.py``.
"""
