"""The fleet page (``crs-controller dashboard``): a read-only page served locally
from the operator's kubeconfig. ``view`` folds what ``status`` reads into what the
page draws and the changes between two looks; ``server`` serves the page, its
assets (``static/``, shipped in the package) and the live feed."""
