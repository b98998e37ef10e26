"""docs/support.md's table of what is lowered is the one the pattern checks against."""

from pathlib import Path

from gqa_torch_mlir.patterns.com_microsoft.group_query_attention.support import ATTRIBUTES, INPUTS, support_table_markdown

SUPPORT = Path(__file__).resolve().parents[2] / "docs" / "support.md"


def test_docs_table_is_rendered_from_the_support_table():
    text = SUPPORT.read_text()
    begin, end = "<!-- support-table:begin -->\n", "\n<!-- support-table:end -->"
    rendered = text[text.index(begin) + len(begin) : text.index(end)]
    assert rendered == support_table_markdown(), "docs/support.md's table is stale: paste support_table_markdown()"


def test_table_covers_the_onnxruntime_schema():
    """Every input and attribute onnxruntime's schema defines has an entry, and no other."""
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

    (schema,) = [s for s in get_all_operator_schema() if s.name == "GroupQueryAttention" and s.domain == "com.microsoft"]
    assert [i.name for i in schema.inputs] == [r.name for r in INPUTS]
    assert set(schema.attributes) == set(ATTRIBUTES)
