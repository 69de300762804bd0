"""Shared by the script tests: pytest puts this folder on sys.path, so every test here can
``from script_loader import load_script`` (a script under scripts/ loaded as a module)."""
