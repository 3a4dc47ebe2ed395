"""Sphinx helpers for the reluattn site.

The project's docstrings are plain text, not reStructuredText: prose paragraphs, code in single backticks,
and indented blocks for examples and tables. `plain_docstring` (an autodoc-process-docstring handler) turns
that into reStructuredText that says the same: indented blocks become literal blocks, `code` becomes a
literal, and the characters RST would take for markup (* and |) are escaped.

Two directives render parts of the public contract straight from the code, so the reference cannot drift
from it:

    ```{config-fields} reluattn.config.AttentionConfig
    ```
        a table of the dataclass's fields: name, type, default and meaning: the help of its flag (the field's
        metadata, reluattn.config.flag) and the comment on its line in the source

    ```{param-tree}
    ```
        the parameter tree of `reluattn.params.param_shapes`, with every option on (class token, qk-norm,
        gate, softmax_ln), its shapes in symbols (D, Dh, M, K, T, P*P*C) and for the reference model REFERENCE_VIT
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

from docutils import nodes
from docutils.parsers.rst import Directive


INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _escape_prose(line: str) -> str:
    """Escape RST markup characters outside `code` spans, and make those spans literals."""
    parts = INLINE_CODE.split(line)  # even indexes: prose; odd: code
    for index in range(0, len(parts), 2):
        parts[index] = re.sub(r"([*|\\])", r"\\\1", parts[index])
    for index in range(1, len(parts), 2):
        parts[index] = f"``{parts[index]}``"
    return "".join(parts)


def plain_docstring(app, what, name, obj, options, lines):
    """Rewrite a plain-text docstring (already dedented by autodoc) into reStructuredText, in place."""
    out, in_block = [], False
    for line in lines:
        indented = line.startswith((" ", "\t")) and line.strip()
        if indented and not in_block:
            if out and out[-1].strip():
                if out[-1].rstrip().endswith(":"):
                    out[-1] = out[-1].rstrip() + ":"  # "text:" + literal block -> "text:" shown, then the block
                    out.append("")
                else:
                    out += ["", "::", ""]
            else:
                out += ["::", ""]
            in_block = True
        elif line.strip() and not indented and in_block:
            out.append("")
            in_block = False
        out.append(line if in_block or not line.strip() else _escape_prose(line))
    lines[:] = out


def _field_comments(cls) -> dict:
    """{field name: the `# comment` on the line that declares it in the class body}."""
    comments = {}
    for line in inspect.getsource(cls).splitlines():
        match = re.match(r"\s+(\w+):\s*[^=#]+(?:=.*?)?\s+#\s*(.*)$", line)
        if match:
            comments[match.group(1)] = match.group(2).strip()
    return comments


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return f"{field.default_factory.__name__}()"
    return "(required)"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*").replace("`", "\\`")


class ConfigFields(Directive):
    required_arguments = 1

    def run(self):
        module_name, class_name = self.arguments[0].rsplit(".", 1)
        cls = getattr(importlib.import_module(module_name), class_name)
        comments = _field_comments(cls)
        table = nodes.table(classes=["config-fields"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (18, 16, 14, 52):
            group += nodes.colspec(colwidth=width)
        head, body = nodes.thead(), nodes.tbody()
        group += head
        group += body

        def row(cells, literal):
            entry_row = nodes.row()
            for text, as_literal in zip(cells, literal):
                entry = nodes.entry()
                paragraph = nodes.paragraph()
                paragraph += nodes.literal(text=text) if as_literal else nodes.Text(text)
                entry += paragraph
                entry_row += entry
            return entry_row

        head += row(["field", "type", "default", "meaning"], [False] * 4)
        for field in dataclasses.fields(cls):
            type_name = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
            meaning = "; ".join(text for text in (field.metadata.get("help"), comments.get(field.name)) if text)
            body += row([field.name, type_name, _default(field), meaning],
                        [True, True, True, False])
        return [table]


SYMBOLS_CONFIG = dict(image_size=32, patch_size=4, channels=3, num_classes=10, dim=192, depth=2, heads=3,
                      mlp_dim=384, pool="cls", mlp_activation="softmax_ln")


class ParamTree(Directive):
    def run(self):
        from reluattn.config import AttentionConfig, ViTConfig
        from reluattn.params import param_shapes

        cfg = ViTConfig(**SYMBOLS_CONFIG, attention=AttentionConfig(qk_norm=True, gated=True))
        symbols = {cfg.dim: "D", 3 * cfg.dim: "3D", cfg.head_dim: "Dh", cfg.mlp_dim: "M", cfg.num_classes: "K",
                   cfg.num_tokens: "T", cfg.patch_dim: "P*P*C"}
        assert len(symbols) == 7, "the reference numbers must be distinct to be read back as symbols"
        tree = param_shapes(cfg)
        lines = []

        def shape_text(shape):
            named = ", ".join(symbols[size] for size in shape)
            numbers = ", ".join(str(size) for size in shape)
            return f"({named}{',' if len(shape) == 1 else ''})".ljust(14) + f"  ({numbers}{',' if len(shape) == 1 else ''})"

        def walk(node, indent, name):
            pad = "    " * indent
            if isinstance(node, tuple):
                lines.append(f"{pad}{name}: ".ljust(34) + shape_text(node))
            elif isinstance(node, list):
                lines.append(f"{pad}{name}: a list of `depth` blocks, each:")
                walk(node[0], indent + 1, None)
            else:
                if name is not None:
                    lines.append(f"{pad}{name}:")
                    indent += 1
                for key, child in node.items():
                    walk(child, indent, key)

        walk(tree, 0, None)
        block = nodes.literal_block("\n".join(lines), "\n".join(lines))
        block["language"] = "text"
        return [block]


def setup(app):
    app.connect("autodoc-process-docstring", plain_docstring)
    app.add_directive("config-fields", ConfigFields)
    app.add_directive("param-tree", ParamTree)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
