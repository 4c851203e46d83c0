"""Every file attnlab reads, declared once as a schema (DESIGN.md, point 21).

One module a format; each declares a pydantic model with ``extra="forbid"`` (unknown keys refused), its required
fields, types, ranges and cross-field rules, and a version in its ``format`` field. ``schema_file.load_json`` turns a
file into the model or into one ``UserError`` line naming the file, the field and the rule; the files attnlab writes
are checked against the same models in the tests.
"""
