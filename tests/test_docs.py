"""The README and the docs site say what the code does: the commands CI runs are the README's, and
every key of a pipeline file is in the pipeline file reference (docs/pipeline.md)."""

from __future__ import annotations

import re

from streamlens.config.model import PipelineFile

from .conftest import REPO

README_COMMANDS = ('pip install -e ".[all]"', "streamlens run pipelines/quickstart.yaml", "python -m pytest -q")


def test_ci_runs_the_readme_commands():
    readme = (REPO / "README.md").read_text()
    for command in README_COMMANDS:
        assert re.search(rf"^{re.escape(command)}\s", readme, re.M), command
    ci = (REPO / ".ci" / "run").read_text()
    assert 'python -m pip install -q -e ".[all]"' in ci and "python -m pytest -q" in ci
    assert "mkdocs build --strict" in ci


def _keys(schema) -> set[str]:
    """Every property name anywhere in a JSON Schema (definitions and inline subschemas included)."""
    found = set()
    if isinstance(schema, dict):
        found |= set(schema.get("properties", {}))
        for value in schema.values():
            found |= _keys(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _keys(value)
    return found


def test_every_pipeline_key_is_in_the_reference():
    page = (REPO / "docs" / "pipeline.md").read_text()
    keys = _keys(PipelineFile.model_json_schema())
    assert {"sources", "max_pixels", "lost_s", "preview_fps", "send_timeout_s", "pad_value"} <= keys
    missing = sorted(k for k in keys if not re.search(rf"\b{re.escape(k)}\b", page))
    assert not missing, f"docs/pipeline.md does not mention {missing}"


def test_every_results_page_is_in_the_sites_nav():
    """A benchmark writes its page to tools/results; the site's --strict build fails on a page left out
    of mkdocs.yml's nav, so a new results page is listed there before it lands."""
    import yaml

    def pages(entry) -> set[str]:
        if isinstance(entry, str):
            return {entry}
        if isinstance(entry, dict):
            return set().union(*(pages(v) for v in entry.values()))
        if isinstance(entry, list):
            return set().union(*(pages(v) for v in entry)) if entry else set()
        return set()

    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    listed = pages(config["nav"])
    written = {f"results/{p.name}" for p in (REPO / "tools" / "results").glob("*.md")}
    assert not written - listed, f"mkdocs.yml's nav leaves out {sorted(written - listed)}"
