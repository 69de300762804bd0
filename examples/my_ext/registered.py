"""A plugin: importing it registers the recipes' extensions (``plugins: [my_ext.registered]``)."""

from flowgrpo.operators.backends import register_backend
from flowgrpo.operators.ops import register_operator
from flowgrpo.rewards import register_component
from my_ext.recipes import ConstantBackend, brevity, shout

register_component("brevity", brevity)  # rewards.weights.brevity=0.1
register_operator("Shout", shout, role="refiner")  # workflows may use Shout
register_backend("constant", ConstantBackend)  # executor.kind=constant
