"""Sphinx configuration of the book (built by ``docs/book/build.py``, ``make book``).

The build step executes the notebooks with papermill into the source folder first; Sphinx
then renders those executed copies as they are (myst-nb, execution off), with the user guide,
the generated performance page and the API reference (autodoc + autosummary of every name of
``mfgwork.__all__``, NumPy-style docstrings read by napoleon). The PyData Sphinx Theme gives a
wide, searchable layout; MathJax 3 is served from the book's own ``_static`` (the
``sphinx-mathjax-offline`` package): no CDN at build or view time.
"""

import os

project = "mfgwork: mean field games in notebooks"
author = "mfgwork developers"
copyright = "mfgwork developers"

extensions = ["myst_nb", "sphinx.ext.mathjax", "sphinx-mathjax-offline", "sphinx.ext.autodoc",
              "sphinx.ext.autosummary", "sphinx.ext.napoleon"]

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

# the API reference: one page per public name, its members and signature from the code
autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
add_module_names = False

html_theme = "pydata_sphinx_theme"
html_title = "mfgwork"
html_static_path = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "_static")]
html_css_files = ["book.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_align": "left",
    "header_links_before_dropdown": 4,
    # nothing fetched from another host: no icon links, no analytics, no version switcher
    "icon_links": [],
}
html_sidebars = {"index": [], "performance": []}
html_show_sourcelink = False


def _plain_bars(app, what, name, obj, options, lines):
    """Docstrings write |x| for absolute values and norms, which reStructuredText would read
    as substitutions: escape every bar outside a table line."""
    for i, line in enumerate(lines):
        if "|" in line and not line.lstrip().startswith(("|", "+")):
            lines[i] = line.replace("|", r"\|")


def setup(app):
    app.connect("autodoc-process-docstring", _plain_bars)
