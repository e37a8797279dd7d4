"""The Markdown report as one self-contained HTML file: the plots embedded as base64 PNG, so it
can be mailed or attached to an issue as it is."""
from __future__ import annotations

import base64
import html

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1200px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f3f3f3; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
code { background: #f3f3f3; padding: 0 0.2em; }
h1, h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
"""


def render(markdown_text: str, images: dict[str, bytes], title: str) -> str:
    """`images`: file name as the Markdown links it -> PNG bytes to embed in its place."""
    import markdown

    body = markdown.markdown(markdown_text, extensions=["tables", _run_text_is_text(images)],
                             output_format="html")
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


def _run_text_is_text(images: dict[str, bytes]):
    """Markdown passes raw HTML through and turns [x](javascript:...) into a link, but the
    report's text comes from runs (variant, device, error, file names) and the page is
    meant to be shared: raw HTML is left as text, and the only URLs are the embedded plots."""
    from markdown.extensions import Extension
    from markdown.treeprocessors import Treeprocessor

    class OwnImagesOnly(Treeprocessor):
        def run(self, root):
            for element in root.iter():
                if element.tag == "a":
                    element.attrib.pop("href", None)
                elif element.tag == "img":
                    png = images.get(element.get("src", ""))
                    if png is None:  # not one of the report's plots: its alt text only
                        element.tag, element.text = "span", element.get("alt")
                        element.attrib.clear()
                    else:
                        element.set("src", "data:image/png;base64," + base64.b64encode(png).decode("ascii"))

    class RunTextIsText(Extension):
        def extendMarkdown(self, md):
            md.preprocessors.deregister("html_block")
            md.inlinePatterns.deregister("html")
            # After 'inline' (20), which makes the links and images; before 'prettify' (10).
            md.treeprocessors.register(OwnImagesOnly(md), "own_images_only", 15)

    return RunTextIsText()
