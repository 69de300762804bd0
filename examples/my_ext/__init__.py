"""An example flowgrpo extension package (docs/USAGE.md, "Your own problems and rewards").

``my_ext.rewards`` holds a plain reward function, named in a config by its dotted path;
``my_ext.plugin`` registers things when imported (list it under ``plugins:``).
"""
