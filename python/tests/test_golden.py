"""The Python API against the CLI on every golden case (tests/golden/cases.txt).

Plan cases (exit 0 or 1): kvplan.plan(**same options).to_json() is byte-identical to `kvplan ... --json`.
Error cases (exit 2): kvplan.plan() raises kvplan.InputError whose message is the CLI's, less "kvplan: ", and
whose to_dict() is the "error" of the CLI's --json.
`kvplan inspect PATH`: kvplan.read_model(PATH).to_json() is byte-identical to `kvplan inspect PATH --json`.
The reference is the CLI of this build ($KVPLAN_CLI, or build/kvplan); without one, the golden files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, Case, NotInPython, cli_path, golden_cases, keywords, run_cli

import kvplan

EXPECTED = REPO / "tests" / "golden" / "expected"

# Golden cases the Python API cannot express: subcommands and flags only the command line has.
CLI_ONLY = {"explain", "explain_rank2", "models", "gpus", "help", "version", "data_override_gpus",
            "err_unmodelled_flag", "err_unknown_flag", "engines_list", "emit_llama_server",
            "emit_llama_cli", "emit_ollama_modelfile", "emit_tabby_config", "err_emit_unknown", "emit_nothing_fits",
            "err_spec_type_alone", "err_unknown_flag_json", "err_not_a_number_json", "err_not_expected_json",
            "err_missing_model"}  # --gpu without --model ranks every model (what fits); explain needs one
INSPECT_CASES = [c for c in golden_cases() if c.args[:1] == ["inspect"]]


def expressible(case: Case) -> bool:
    try:
        keywords(case.args)
    except NotInPython:
        return False
    return True


PLAN_CASES = [c for c in golden_cases() if c.exit_code in (0, 1) and expressible(c)]
ERROR_CASES = [c for c in golden_cases() if c.exit_code == 2 and expressible(c)]


def golden_streams(name: str) -> tuple[bytes, bytes]:
    """stdout and stderr of a golden file (tests/golden/run_golden.py's format)."""
    data = (EXPECTED / f"{name}.out").read_bytes()
    stdout, rest = data.split(b"--- stderr ---\n", 1)
    stderr = rest.rsplit(b"--- exit ", 1)[0]
    return stdout, stderr


def reference(case: Case) -> tuple[int, bytes, bytes]:
    """Exit code, stdout and stderr of the CLI for the case with --json."""
    args = case.args if "--json" in case.args else [*case.args, "--json"]
    if cli_path() is None and "--json" in case.args:
        return (case.exit_code, *golden_streams(case.name))
    proc = run_cli(args)
    return proc.returncode, proc.stdout, proc.stderr


def test_every_golden_case_is_covered() -> None:
    left_out = {c.name for c in golden_cases() if not expressible(c)} - {c.name for c in INSPECT_CASES}
    assert left_out == CLI_ONLY
    assert PLAN_CASES and ERROR_CASES


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.name)
def test_to_json_is_the_cli_json(case: Case, in_repo: Path) -> None:
    code, stdout, stderr = reference(case)
    assert code == case.exit_code, stderr.decode()
    p = kvplan.plan(**keywords(case.args))
    assert p.to_json().encode("utf-8") == stdout
    # exit 0: a recommendation; exit 1: nothing acceptable (options fit, every one rates avoid) or nothing fits
    assert (p.verdict == "ok") == (case.exit_code == 0) == (p.recommended is not None)
    assert p.fits == (p.verdict != "nothing_fits")
    assert [s.to_dict() for s in p.suggestions] == p.to_dict()["suggestions"]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.name)
def test_input_error_is_the_cli_error(case: Case, in_repo: Path) -> None:
    code, stdout, stderr = reference(case)
    assert code == 2
    with pytest.raises(kvplan.InputError) as raised:
        kvplan.plan(**keywords(case.args))
    error = raised.value
    assert isinstance(error, ValueError)
    assert f"kvplan: {error}\n".encode("utf-8") == stderr
    assert error.field and error.problem
    assert str(error).startswith(error.field)
    # under --json the CLI also prints the error as an object (schema/plan.schema.json $defs/error): the same fields
    assert json.loads(stdout) == {"schema_version": kvplan.SCHEMA_VERSION, "error": error.to_dict()}


@pytest.mark.parametrize("case", INSPECT_CASES, ids=lambda c: c.name)
def test_read_model_is_cli_inspect(case: Case, in_repo: Path) -> None:
    path = next(a for a in case.args[1:] if not a.startswith("-"))
    proc = run_cli(["inspect", path, "--json"])
    assert proc.returncode == case.exit_code == 0, proc.stderr.decode()
    assert kvplan.read_model(path).to_json().encode("utf-8") == proc.stdout


@pytest.mark.parametrize("model", [m.id for m in kvplan.models()])
def test_every_catalog_model_matches_the_cli(model: str, in_repo: Path) -> None:
    """Beyond the golden cases: every architecture family of the catalog, planned as the CLI plans it."""
    args = ["--gpu", "h100-sxm", "--model", model, "--task", "coding", "--top", "3"]
    proc = run_cli([*args, "--json"])
    if proc.returncode == 2:
        with pytest.raises(kvplan.InputError) as raised:
            kvplan.plan(**keywords(args))
        assert f"kvplan: {raised.value}\n".encode("utf-8") == proc.stderr
        return
    assert proc.returncode in (0, 1), proc.stderr.decode()
    assert kvplan.plan(**keywords(args)).to_json().encode("utf-8") == proc.stdout
