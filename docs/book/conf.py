"""Sphinx configuration of the course book (built by ``docs/book/build.py``, ``make book``).

The build step executes the notebooks with papermill into the source folder first; Sphinx
then renders those executed copies as they are (myst-nb, execution off). MathJax 3 is served
from the book's own ``_static`` (the ``sphinx-mathjax-offline`` package): no CDN at build or
view time.
"""

project = "mfgwork: mean field games in notebooks"
author = "mfgwork developers"
copyright = "mfgwork developers"

extensions = ["myst_nb", "sphinx.ext.mathjax", "sphinx-mathjax-offline"]

# the executed notebooks are rendered, never re-executed
nb_execution_mode = "off"
# widgets need the jupyter-widgets JavaScript, which only a CDN serves: it is not loaded, so
# a widget output shows nothing (the explorer notebook also shows its figures as images)
nb_ipywidgets_js = {}
nb_merge_streams = True

myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# the README copy is only included into the index page
exclude_patterns = ["README.md", "**.ipynb_checkpoints"]

html_theme = "alabaster"
html_title = "mfgwork course"
html_theme_options = {"description": "Mean field games with mfgwork", "fixed_sidebar": True}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
