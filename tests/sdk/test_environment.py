"""`tao_sdk.environment` is the one place that reads `TAO_*` variables, and its table lists each of them."""

import ast
import re
from pathlib import Path

import pytest

from tao_sdk import environment

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("tao_sdk", "server", "integrations", "examples")
READERS = {"get", "getenv", "pop", "setdefault"}


def tao_variable_reads(root: Path) -> list[str]:
    """`file:line name` for each read of a `TAO_*` variable by name (`….get("TAO_X")`, `…["TAO_X"]`, `getenv`)."""
    found = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                key = None
                if isinstance(node, ast.Call) and node.args:
                    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    key = node.args[0] if called in READERS else None
                elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                    key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("TAO_"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {key.value}")
    return found


def test_only_the_environment_module_reads_tao_variables():
    assert [read for read in tao_variable_reads(ROOT) if not read.startswith("tao_sdk/environment.py")] == []


def test_the_check_itself_finds_each_form_of_read(tmp_path):
    (tmp_path / "tao_sdk").mkdir()
    (tmp_path / "tao_sdk" / "bad.py").write_text(
        'import os\nos.environ.get("TAO_A")\nos.environ["TAO_B"]\nos.getenv("TAO_C")\nenv.get("TAO_D", "1")\n'
        'os.environ["OTHER"]\n'
    )
    reads = sorted(read.split(" ")[1] for read in tao_variable_reads(tmp_path))
    assert reads == ["TAO_A", "TAO_B", "TAO_C", "TAO_D"]


def test_the_documented_table_lists_every_variable_read():
    documented = re.findall(r"^\| `(TAO_[A-Z_]+)` \|", environment.__doc__ or "", flags=re.MULTILINE)
    read = sorted(set(re.findall(r'_get\("(TAO_[A-Z_]+)"', Path(environment.__file__).read_text())))
    assert documented == list(environment.VARIABLES)
    assert read == sorted(environment.VARIABLES)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ()),
        ("", ()),
        ("http://a:8000", ("http://a:8000",)),
        (" http://a:8000 , ,http://b:8001/ ", ("http://a:8000", "http://b:8001/")),
    ],
)
def test_nodes_are_the_comma_separated_urls(value, expected):
    env = {} if value is None else {"TAO_NODES": value}
    assert environment.nodes(env) == expected


def test_an_empty_variable_is_unset_and_os_environ_is_the_default(monkeypatch):
    assert environment.token({"TAO_TOKEN": ""}) is None
    monkeypatch.setenv("TAO_COORDINATOR", "http://127.0.0.1:8700")
    monkeypatch.delenv("TAO_PROXY_URL", raising=False)
    assert environment.coordinator() == "http://127.0.0.1:8700"
    assert environment.proxy_url() is None
