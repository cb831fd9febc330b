"""Settings: precedence (flag > TQGGUF_* > OLLAMA_* > default), sources, strict parsing,
and ``tqgguf env``. Pure Python: no engine, no model, no network."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import click
from click.testing import CliRunner

from tqgguf.cachetypes import KV_CACHE_TYPES
from tqgguf.cli import main
from tqgguf.config import (Settings, SettingsError, auto_max_loaded_models, check_listen_address, resolve_settings,
                           setting, settings_report)
from tqgguf.values import format_duration, parse_duration, parse_host
from tqgguf.variables import OLLAMA_OWN_VARIABLES, VARIABLES, closest_variable, unknown_variables

# (setting, flag key, flag value, TQGGUF variable, value, OLLAMA variable or None, value,
#  expected value from flag, from TQGGUF, from OLLAMA, default)
MATRIX = [
    ("cache_type_k", "cache_type_k", "turbo3", "TQGGUF_KV_CACHE_TYPE_K", "turbo4", "OLLAMA_KV_CACHE_TYPE", "q4_0",
     "turbo3", "turbo4", "q4_0", "f16"),
    ("cache_type_v", "cache_type_v", "turbo3", "TQGGUF_KV_CACHE_TYPE_V", "turbo4", "OLLAMA_KV_CACHE_TYPE", "q4_0",
     "turbo3", "turbo4", "q4_0", "f16"),
    ("flash_attention", "flash_attention", "auto", "TQGGUF_FLASH_ATTENTION", "off", "OLLAMA_FLASH_ATTENTION", "1",
     "auto", "off", "on", "auto"),
    ("attn_rotation", "attn_rotation", False, "TQGGUF_ATTN_ROTATION", "false", None, None,
     False, False, None, True),
    ("host", "host", "10.0.0.1", "TQGGUF_HOST", "10.0.0.2", "OLLAMA_HOST", "10.0.0.3",
     "10.0.0.1", "10.0.0.2", "10.0.0.3", "127.0.0.1"),
    ("port", "port", "1111", "TQGGUF_HOST", ":2222", "OLLAMA_HOST", "0.0.0.0:3333",
     1111, 2222, 3333, 11434),
    ("context_length", "context_length", "1024", "TQGGUF_CONTEXT_LENGTH", "2048", "OLLAMA_CONTEXT_LENGTH", "8192",
     1024, 2048, 8192, 4096),
    ("num_parallel", "num_parallel", "2", "TQGGUF_NUM_PARALLEL", "3", "OLLAMA_NUM_PARALLEL", "4",
     2, 3, 4, 1),
    ("keep_alive", "keep_alive", "30s", "TQGGUF_KEEP_ALIVE", "1h", "OLLAMA_KEEP_ALIVE", "-1",
     30.0, 3600.0, -1.0, 300.0),
]


def _ids(row):
    return row[0]


@pytest.mark.parametrize("row", MATRIX, ids=_ids)
def test_flag_beats_tqgguf_beats_ollama_beats_default(row):
    name, key, flag_v, tq, tq_v, ol, ol_v, exp_flag, exp_tq, exp_ol, exp_default = row
    env_all = {tq: tq_v, **({ol: ol_v} if ol else {})}
    if key is not None:
        s = resolve_settings({key: flag_v}, env_all, check=False)
        assert getattr(s, name) == exp_flag
        assert s.source(name).kind == "flag"
    s = resolve_settings({}, env_all, check=False)
    assert getattr(s, name) == exp_tq
    assert (s.source(name).kind, s.source(name).name) == ("env", tq)
    if ol:
        s = resolve_settings({}, {ol: ol_v}, check=False)
        assert getattr(s, name) == exp_ol
        assert (s.source(name).kind, s.source(name).name, s.source(name).raw) == ("env", ol, ol_v)
    s = resolve_settings({}, {}, check=False)
    assert s.source(name).kind == "default"
    if exp_default is not None:
        assert getattr(s, name) == exp_default


def test_joint_cache_type_sets_both_and_per_side_variables_override_it():
    s = resolve_settings({}, {"TQGGUF_KV_CACHE_TYPE": "q8_0"})
    assert (s.cache_type_k, s.cache_type_v) == ("q8_0", "q8_0")
    assert s.source("cache_type_v").name == "TQGGUF_KV_CACHE_TYPE"
    s = resolve_settings({}, {"TQGGUF_KV_CACHE_TYPE": "q8_0", "TQGGUF_KV_CACHE_TYPE_V": "turbo3",
                              "OLLAMA_KV_CACHE_TYPE": "q4_0"})
    assert (s.cache_type_k, s.cache_type_v) == ("q8_0", "turbo3")
    assert s.source("cache_type_k").name == "TQGGUF_KV_CACHE_TYPE"
    assert s.source("cache_type_v").name == "TQGGUF_KV_CACHE_TYPE_V"
    s = resolve_settings({"cache_type_v": "TURBO4"}, {"OLLAMA_KV_CACHE_TYPE": "q4_0"})
    assert (s.cache_type_k, s.cache_type_v) == ("q4_0", "turbo4")  # names are case-insensitive


def test_empty_variable_counts_as_unset():
    s = resolve_settings({}, {"TQGGUF_CONTEXT_LENGTH": "  ", "OLLAMA_CONTEXT_LENGTH": "2048"})
    assert s.context_length == 2048
    assert s.source("context_length").name == "OLLAMA_CONTEXT_LENGTH"


def test_bare_host_leaves_the_port_to_the_next_source():
    s = resolve_settings({"host": "0.0.0.0"}, {"OLLAMA_HOST": "127.0.0.1:9000"})
    assert (s.host, s.port) == ("0.0.0.0", 9000)
    assert s.source("host").kind == "flag" and s.source("port").name == "OLLAMA_HOST"
    s = resolve_settings({"host": "localhost:8081", "port": "9999"}, {})
    assert (s.host, s.port) == ("localhost", 9999)


@pytest.mark.parametrize("text,scheme,host,port", [
    ("0.0.0.0", "http", "0.0.0.0", None),
    (":8080", "http", "0.0.0.0", 8080),
    ("example.com:1234", "http", "example.com", 1234),
    ("http://127.0.0.1:11435", "http", "127.0.0.1", 11435),
    ("http://myhost", "http", "myhost", 80),
    ("https://myhost/", "https", "myhost", 443),
    ("[::1]:8000", "http", "::1", 8000),
    ("::1", "http", "::1", None),
])
def test_host_forms_as_ollama_reads_them(text, scheme, host, port):
    hp = parse_host(text)
    assert (hp.scheme, hp.host, hp.port) == (scheme, host, port)


@pytest.mark.parametrize("text,seconds", [
    ("5m", 300.0), ("1h", 3600.0), ("30s", 30.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("500ms", 0.5),
    ("300", 300.0), ("0", 0.0), ("-1", -1.0), ("-5m", -1.0),
])
def test_keep_alive_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["99999999999h", "876600h1s", 1e300])
def test_keep_alive_beyond_100_years_is_refused_and_points_at_minus_1(text):
    """A finite keep-alive that large overflowed the server's expiry timestamps (/api/ps: 500)."""
    with pytest.raises(ValueError, match="use -1 to keep the model loaded forever"):
        parse_duration(text)
    assert parse_duration("876000h") == pytest.approx(876000 * 3600.0)  # 100 years still fine


def test_format_duration_round_trips_the_common_forms():
    assert [format_duration(x) for x in (300, 3600, 5400, 30, 0, -1, 0.5)] == \
        ["5m", "1h", "1h30m", "30s", "0s", "forever", "0.5s"]


@pytest.mark.parametrize("text,size", [("33554432", 32 << 20), ("32MiB", 32 << 20), ("32m", 32 << 20),
                                       ("64MB", 64_000_000), ("1.5 GiB", 3 << 29), ("512kib", 512 << 10)])
def test_request_body_limit_sizes(text, size):
    s = resolve_settings({}, {"TQGGUF_MAX_REQUEST_BODY": text})
    assert s.max_request_body == size and str(s.source("max_request_body")) == "env TQGGUF_MAX_REQUEST_BODY"
    assert resolve_settings({}, {}).display("max_request_body") == "32 MiB"


@pytest.mark.parametrize("var,value,allowed", [
    ("TQGGUF_KV_CACHE_TYPE", "q9", "turbo4"),
    ("OLLAMA_KV_CACHE_TYPE", "fp8", "q8_0"),
    ("TQGGUF_KV_CACHE_TYPE_K", "turbo5", "turbo3"),
    ("TQGGUF_ATTN_ROTATION", "maybe", "true/false"),
    ("OLLAMA_FLASH_ATTENTION", "enabled", "on, off, auto"),
    ("TQGGUF_CONTEXT_LENGTH", "4k", "integer"),
    ("OLLAMA_CONTEXT_LENGTH", "10", "from 64"),
    ("TQGGUF_NUM_PARALLEL", "1025", "from 0 to 1024 (0 = auto"),
    ("OLLAMA_MAX_LOADED_MODELS", "-1", "from 0 to 64 (0 = auto"),
    ("TQGGUF_BODY_TIMEOUT", "soon", "5m"),
    ("TQGGUF_BODY_TIMEOUT", "-1s", "0 for no limit"),  # not "forever" as a keep-alive's: refused
    ("TQGGUF_BODY_TIMEOUT", "-1", "0 for no limit"),
    ("OLLAMA_NUM_PARALLEL", "two", "integer"),
    ("TQGGUF_KEEP_ALIVE", "5 minutes", "5m"),
    ("OLLAMA_KEEP_ALIVE", "1d", "1h30m"),
    ("TQGGUF_HOST", "host:99999", "65535"),
    ("OLLAMA_HOST", "ftp://host", "http(s)://"),
    ("TQGGUF_HOST", "8080", ":8080"),
    ("TQGGUF_MAX_REQUEST_BODY", "32 megs", "32MiB"),
    ("TQGGUF_MAX_REQUEST_BODY", "100", "1 KiB to"),
])
def test_bad_value_error_names_variable_value_and_what_is_allowed(var, value, allowed):
    with pytest.raises(SettingsError) as ei:
        resolve_settings({}, {var: value})
    msg = str(ei.value)
    assert var in msg and repr(value) in msg and "allowed" in msg and allowed in msg


def test_bad_flag_error_names_the_flag():
    with pytest.raises(SettingsError, match=r"--ctk 'q3_k'.*allowed: f32"):
        resolve_settings({"cache_type_k": "q3_k"}, {})
    with pytest.raises(SettingsError, match=r"--port 'http'"):
        resolve_settings({"port": "http"}, {})


def test_every_bad_value_is_reported_at_once():
    with pytest.raises(SettingsError) as ei:
        resolve_settings({}, {"TQGGUF_KV_CACHE_TYPE_V": "x", "OLLAMA_NUM_PARALLEL": "y", "TQGGUF_KEEP_ALIVE": "z"})
    assert len(ei.value.errors) == 3


def test_a_value_shadowed_by_a_higher_source_is_not_parsed():
    s = resolve_settings({"num_parallel": "2"}, {"OLLAMA_NUM_PARALLEL": "lots"})
    assert s.num_parallel == 2


def test_fa_off_with_quantized_v_names_where_each_came_from():
    with pytest.raises(SettingsError) as ei:
        resolve_settings({"cache_type_v": "turbo4"}, {"OLLAMA_FLASH_ATTENTION": "false"})
    msg = str(ei.value)
    assert "OLLAMA_FLASH_ATTENTION='false'" in msg and "--ctv='turbo4'" in msg and "quantized" in msg
    with pytest.raises(SettingsError, match=r"flag -fa='off'.*TQGGUF_KV_CACHE_TYPE='q8_0'"):
        resolve_settings({"flash_attention": "off"}, {"TQGGUF_KV_CACHE_TYPE": "q8_0"})
    s = resolve_settings({"flash_attention": "off", "cache_type_k": "turbo4"}, {})  # quantized K alone is fine
    assert (s.flash_attention, s.cache_type_v) == ("off", "f16")


def test_settings_constructed_directly_are_validated_with_the_same_parsers():
    s = Settings(keep_alive="1h", attn_rotation="no", cache_type_k="Q8_0", port="8080")
    assert (s.keep_alive, s.attn_rotation, s.cache_type_k, s.port) == (3600.0, False, "q8_0", 8080)
    with pytest.raises(ValueError, match="unknown cache type"):
        Settings(cache_type_v="q9")


def test_every_setting_and_variable_is_described():
    for name, field in Settings.model_fields.items():
        assert field.description, name
    for var, desc in VARIABLES.items():
        assert desc, var
    for ollama in ("OLLAMA_KV_CACHE_TYPE", "OLLAMA_FLASH_ATTENTION", "OLLAMA_HOST", "OLLAMA_CONTEXT_LENGTH",
                   "OLLAMA_NUM_PARALLEL", "OLLAMA_KEEP_ALIVE", "OLLAMA_MODELS"):
        used = [r for r in resolve_settings({}, {}).describe() if ollama in r["env"]]
        assert used, f"{ollama} is not read by any setting"


def test_unknown_tqgguf_variables_are_reported():
    assert unknown_variables({"TQGGUF_KV_CACHE_TPYE": "q8_0", "TQGGUF_HOST": "x", "PATH": "/bin"}) == \
        ["TQGGUF_KV_CACHE_TPYE"]


def test_ollama_typos_are_reported_but_ollamas_own_variables_are_not():
    env = {"OLLAMA_KV_CACHE_TYP": "turbo4", "OLLAMA_NUM_PARALEL": "2", "OLLAMA_ORIGINS": "*", "OLLAMA_DEBUG": "1",
           "OLLAMA_MODELS": "/m", "OLLAMA_LOAD_TIMEOUT": "5m", "OLLAMA_MAX_QUEUE": "9", "OLLAMA_SOMETHING_ELSE": "1",
           "OLLAMA_TMPDIR": "/t", "PATH": "/bin"}
    assert unknown_variables(env) == ["OLLAMA_KV_CACHE_TYP", "OLLAMA_NUM_PARALEL"]
    assert closest_variable("OLLAMA_KV_CACHE_TYP") == "OLLAMA_KV_CACHE_TYPE"
    assert closest_variable("OLLAMA_NUM_PARALEL") == "OLLAMA_NUM_PARALLEL"
    assert unknown_variables({k: "1" for k in OLLAMA_OWN_VARIABLES}) == []
    assert {k for k in VARIABLES if k.startswith("OLLAMA_")} <= OLLAMA_OWN_VARIABLES  # tqgguf reads real ones


def test_a_verb_warns_about_an_ollama_typo_with_the_name_it_meant():
    r = CliRunner().invoke(main, ["ppl", "--help"], env=_clean_env(OLLAMA_KV_CACHE_TYP="turbo4", OLLAMA_ORIGINS="*"))
    assert r.exit_code == 0, r.output
    assert ("warning: OLLAMA_KV_CACHE_TYP is set but tqgguf does not read it (typo?); did you mean "
            "OLLAMA_KV_CACHE_TYPE?") in r.output
    assert "OLLAMA_ORIGINS" not in r.output
    r = CliRunner().invoke(main, ["env", "--json"], env=_clean_env(OLLAMA_KV_CACHE_TYP="turbo4"))
    assert json.loads(r.stdout)["did_you_mean"] == {"OLLAMA_KV_CACHE_TYP": "OLLAMA_KV_CACHE_TYPE"}


def test_report_lists_every_setting_with_source_and_every_variable():
    env = {"TQGGUF_KV_CACHE_TYPE": "turbo4", "OLLAMA_HOST": ":8080"}
    rep = settings_report(resolve_settings({}, env), env)
    assert set(rep["settings"]) == set(Settings.model_fields)
    assert rep["settings"]["cache_type_k"]["source"] == {"kind": "env", "name": "TQGGUF_KV_CACHE_TYPE", "raw": "turbo4",
                                                       "auto": False}
    assert rep["settings"]["port"]["value"] == 8080
    assert set(rep["variables"]) == set(VARIABLES)
    assert rep["variables"]["OLLAMA_HOST"]["value"] == ":8080"
    assert rep["variables"]["TQGGUF_MODELS"]["value"] is None
    json.dumps(rep, default=str)


def _clean_env(**set_vars) -> dict:
    env = {k: None for k in VARIABLES}
    env.update(set_vars)
    return env


def test_env_command_json_shows_value_and_source():
    r = CliRunner().invoke(main, ["env", "--json"],
                           env=_clean_env(TQGGUF_KV_CACHE_TYPE_V="turbo3", OLLAMA_NUM_PARALLEL="4"))
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    st = rep["settings"]
    assert st["cache_type_v"]["value"] == "turbo3" and st["cache_type_v"]["source"]["name"] == "TQGGUF_KV_CACHE_TYPE_V"
    assert st["num_parallel"]["value"] == 4 and st["num_parallel"]["source"]["name"] == "OLLAMA_NUM_PARALLEL"
    assert st["cache_type_k"]["source"]["kind"] == "default"
    assert st["keep_alive"]["display"] == "5m"


def test_env_command_table_lists_every_variable():
    r = CliRunner().invoke(main, ["env"], env={**_clean_env(OLLAMA_KEEP_ALIVE="10m"), "COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    for var in VARIABLES:
        assert var in r.output
    assert "10m" in r.output


def test_env_command_at_80_columns_keeps_names_whole_and_lines_short():
    r = CliRunner().invoke(main, ["env"], env={**_clean_env(OLLAMA_KV_CACHE_TYPE="q8_0"), "COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    words = set(r.output.replace(",", " ").replace(";", " ").split())
    for var in VARIABLES:  # every variable whole on one line, not folded mid-word as in a narrow table
        assert var in words, var
    for name in resolve_settings({}, {}).describe():
        assert name["name"] in words
    assert "cache_type_k = q8_0  (env OLLAMA_KV_CACHE_TYPE='q8_0')" in lines


def test_env_command_suggests_the_declared_name_for_a_typo():
    r = CliRunner().invoke(main, ["env"], env={**_clean_env(TQGGUF_KV_BOUNDRY="2", TQGGUF_ZZZ="1"), "COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    # on stderr, as every verb warns, and before the report (the group warns before the verb runs)
    assert "TQGGUF_KV_BOUNDRY is set but tqgguf does not read it (typo?); did you mean TQGGUF_KV_BOUNDARY?" in r.stderr
    assert "TQGGUF_ZZZ is set but tqgguf does not read it (typo?); `tqgguf env` lists" in r.stderr  # no guess
    assert "typo" not in r.stdout and r.output.index("TQGGUF_ZZZ is set") < r.output.index("Settings")
    r = CliRunner().invoke(main, ["env", "--json"], env=_clean_env(TQGGUF_KV_BOUNDRY="2", TQGGUF_ZZZ="1",
                                                                    TQGGUF_KV_CACHE_TYPE_k="q8_0", tqgguf_models="/m"))
    rep = json.loads(r.stdout)
    assert rep["did_you_mean"] == {"TQGGUF_KV_BOUNDRY": "TQGGUF_KV_BOUNDARY", "TQGGUF_ZZZ": None,
                                   "TQGGUF_KV_CACHE_TYPE_k": "TQGGUF_KV_CACHE_TYPE_K", "tqgguf_models": "TQGGUF_MODELS"}


def test_env_command_bad_value_exits_2_with_the_reason():
    r = CliRunner().invoke(main, ["env"], env=_clean_env(TQGGUF_KV_CACHE_TYPE="q9"))
    assert r.exit_code == 2
    assert "TQGGUF_KV_CACHE_TYPE='q9'" in r.output and ", ".join(KV_CACHE_TYPES) in r.output


def test_tqgguf_text_is_a_declared_setting_that_texts_reads(tmp_path, monkeypatch):
    from tqgguf.texts import resolve_text

    f = tmp_path / "t.txt"
    f.write_text("hello world")
    env = {"TQGGUF_TEXT": str(f)}
    assert unknown_variables(env) == []  # `tqgguf env` no longer calls it a typo
    st = resolve_settings({}, env)
    assert st.text == f and st.source("text").describe() == f"env TQGGUF_TEXT={str(f)!r}"
    assert resolve_settings({}, {}).display("text") == "-"
    monkeypatch.setenv("TQGGUF_TEXT", str(f))
    t = resolve_text(allow_download=False)
    assert (t.content, t.label, t.path) == ("hello world", "t.txt (TQGGUF_TEXT)", f)
    monkeypatch.setenv("TQGGUF_TEXT", str(tmp_path))
    with pytest.raises(ValueError, match=r"TQGGUF_TEXT=.*is a directory"):
        resolve_text(allow_download=False)
    monkeypatch.setenv("TQGGUF_TEXT", str(tmp_path / "missing.txt"))
    with pytest.raises(FileNotFoundError, match="TQGGUF_TEXT=.*missing.txt does not exist"):
        resolve_text(allow_download=False)


def test_models_dir_precedence_is_the_settings_models_field(tmp_path, monkeypatch):
    from tqgguf import models
    from tqgguf.models import ModelError

    monkeypatch.delenv("TQGGUF_MODELS", raising=False)
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("TQGGUF_CACHE", str(tmp_path / "cache"))
    assert models.models_dir() == tmp_path / "cache" / "models" == resolve_settings({}).models
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))  # Ollama's store, not tqgguf's downloads
    assert models.models_dir() == tmp_path / "cache" / "models" == resolve_settings({}).models
    assert resolve_settings({}).ollama_models == tmp_path / "ollama"
    monkeypatch.setenv("TQGGUF_MODELS", str(tmp_path / "ours"))
    assert models.models_dir() == tmp_path / "ours" == resolve_settings({}).models
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TQGGUF_MODELS", str(tmp_path / "file"))
    with pytest.raises(ModelError, match="TQGGUF_MODELS=.*not a directory"):
        models.models_dir()


def test_shared_cli_options_are_declared_once_and_validated_by_the_settings_model():
    from tqgguf.commands import ppl, serve, sweep

    def opts(cmd):
        return {p.name: (tuple(p.opts), tuple(p.secondary_opts), p.help) for p in cmd.params if isinstance(p, click.Option)}

    p, s, w = opts(ppl.command), opts(serve.command), opts(sweep.command)
    for name in ("ctk", "ctv", "flash_attn", "rot", "k_center"):
        assert p[name] == s[name], name
    for name in ("ctk", "ctv", "k_center"):
        assert w[name][:2] == p[name][:2], name  # same names; sweep takes comma lists of them
    assert p["ctk"][0] == ("-ctk", "--ctk", "--cache-type-k")
    assert "TQGGUF_KV_CACHE_TYPE_K" in p["ctk"][2] and "default f16" in p["ctk"][2]  # help from the model
    env = _clean_env()
    for verb in ("ppl", "serve"):
        r = CliRunner().invoke(main, [verb, "no-such-model.gguf", "--ctk", "q9"], env=env)
        assert r.exit_code == 2, (verb, r.output)
        assert "--ctk 'q9': unknown cache type; allowed: f32" in r.output, (verb, r.output)
        r = CliRunner().invoke(main, [verb, "no-such-model.gguf", "-fa", "off", "--ctv", "turbo4"], env=env)
        assert r.exit_code == 2 and "flash attention is off (from flag -fa='off')" in r.output, (verb, r.output)


@pytest.mark.parametrize("var", ["OLLAMA_NUM_PARALLEL", "TQGGUF_NUM_PARALLEL"])
def test_num_parallel_zero_is_auto_one_slot_as_ollama(var):
    s = resolve_settings({}, {var: "0"})
    assert s.num_parallel == 1 and s.source("num_parallel").auto
    assert str(s.source("num_parallel")) == f"auto: {var}=0"
    assert resolve_settings({}, {var: "3"}).num_parallel == 3 and not resolve_settings({}, {var: "3"}).source(
        "num_parallel").auto
    assert setting("num_parallel", {var: "0"}) == 1


def test_np_flag_zero_is_refused_as_llama_server_does_and_names_the_auto_variables():
    with pytest.raises(SettingsError) as ei:
        resolve_settings({"num_parallel": "0"}, {"OLLAMA_NUM_PARALLEL": "0"})
    assert ei.value.errors == ["-np '0': out of range; allowed: an integer from 1 to 1024 (as llama-server's -np; "
                               "auto is the variable's 0: TQGGUF_NUM_PARALLEL=0 or OLLAMA_NUM_PARALLEL=0)"]
    # a flag that is good wins over the auto variable
    s = resolve_settings({"num_parallel": "2"}, {"OLLAMA_NUM_PARALLEL": "0"})
    assert s.num_parallel == 2 and str(s.source("num_parallel")) == "flag -np"


def test_max_loaded_models_zero_is_auto_three_per_gpu_as_ollama():
    s = resolve_settings({}, {"OLLAMA_MAX_LOADED_MODELS": "0"})
    assert s.max_loaded_models == 0 and s.source("max_loaded_models").auto
    assert s.display("max_loaded_models") == "auto (3 per GPU, 3 on the CPU)"
    assert [auto_max_loaded_models(n) for n in (0, 1, 2, 8)] == [3, 3, 6, 24]
    # TQGGUF_ over OLLAMA_: a concrete count wins over Ollama's auto
    assert resolve_settings({}, {"OLLAMA_MAX_LOADED_MODELS": "0", "TQGGUF_MAX_LOADED_MODELS": "2"}).max_loaded_models == 2


@pytest.mark.parametrize("text, seconds", [("30s", 30.0), ("500ms", 0.5), ("2", 2.0), ("0", 0.0), ("-0s", 0.0)])
def test_body_timeout_durations_and_zero_for_no_limit(text, seconds):
    s = resolve_settings({}, {"TQGGUF_BODY_TIMEOUT": text})
    assert s.body_timeout == seconds
    assert resolve_settings({}, {}).body_timeout == 60.0 and resolve_settings({}, {}).display("body_timeout") == "1m"


def test_listen_host_that_does_not_resolve_or_is_not_local_is_named_by_its_source():
    for env, needle in [({"OLLAMA_HOST": "garbage"}, "OLLAMA_HOST='garbage': cannot resolve host 'garbage'"),
                        ({"TQGGUF_HOST": "garbage:8080", "OLLAMA_HOST": "0.0.0.0"},
                         "TQGGUF_HOST='garbage:8080': cannot resolve host 'garbage'"),
                        # TEST-NET-2 (RFC 5737): never an address of this machine
                        ({"OLLAMA_HOST": "198.51.100.7"}, "OLLAMA_HOST='198.51.100.7': address 198.51.100.7 is not "
                                                          "one of this machine's")]:
        with pytest.raises(SettingsError) as ei:
            check_listen_address(resolve_settings({}, env))
        assert ei.value.errors[0].startswith(needle), ei.value.errors
    with pytest.raises(SettingsError) as ei:
        check_listen_address(resolve_settings({"host": "garbage"}, {"OLLAMA_HOST": "127.0.0.1"}))
    assert ei.value.errors[0].startswith("--host 'garbage': cannot resolve host")
    for good in ("127.0.0.1", "0.0.0.0:9", "localhost", "http://[::1]:8080"):
        check_listen_address(resolve_settings({}, {"OLLAMA_HOST": good}))


@pytest.mark.parametrize("verb", ["bench", "ppl", "sweep", "serve", "mix", "rpc-server"])
def test_threads_above_ggml_s_limit_are_refused_by_every_verb(verb):
    """ggml runs at most GGML_MAX_N_THREADS = 512 CPU threads (its threadpool indexes per-thread arrays of that
    size; llama-server with -t 100000 ends by SIGSEGV): -t 513 is a usage error naming the range, in every verb."""
    from click.testing import CliRunner

    res = CliRunner().invoke(main, [verb, "smollm2-135m", "-t", "513"] if verb != "rpc-server" else [verb, "-t", "513"])
    assert res.exit_code == 2, res.output
    assert "513" in res.output and "512" in res.output, res.output
