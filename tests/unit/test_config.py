"""YAML validation: each mistake gives one sentence naming the key path and the fix."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from hybrid_shuffle.config import (
    OPERATORS_MIN_MEMORY,
    Config,
    ConfigWarning,
    EdgeConfig,
    OperatorsConfig,
    ShuffleConfig,
    format_size,
    load_config,
    parse_size,
)
from hybrid_shuffle.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_loads_into_typed_values() -> None:
    config = load_config(ROOT / "configs" / "quickstart.yaml")
    assert config.job == "revenue"
    assert config.parallelism == 4 and config.slots == 4
    assert config.shuffle.service == "executor-local"
    assert config.shuffle.default_mode == "hybrid-selective"
    assert config.shuffle.buffer_size == 4 << 20
    assert config.shuffle.memory_budget == 512 << 20
    assert config.edge("by_customer") == EdgeConfig("pipelined", None, keep=True)
    assert config.edge("to_sort") == EdgeConfig("blocking", 8)
    assert config.edge("absent") == EdgeConfig()


def test_no_config_means_defaults() -> None:
    config = load_config(None)
    assert config.parallelism == 2 and config.slots is None
    assert config.shuffle.credits == 4 and config.shuffle.wait_timeout == 300.0
    assert dict(config.edges) == {}


def test_config_is_immutable() -> None:
    config = load_config({"edges": {"e": {"mode": "blocking"}}})
    with pytest.raises(AttributeError):
        config.parallelism = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.edges["f"] = EdgeConfig()  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4 MiB", 4 << 20),
        ("512MiB", 512 << 20),
        ("1 GiB", 1 << 30),
        ("64KiB", 64 << 10),
        ("1GB", 10**9),
        ("1000", 1000),
        ("2.5 MiB", int(2.5 * (1 << 20))),
        (123, 123),
    ],
)
def test_sizes_parse_binary_and_decimal_units(text: Any, size: int) -> None:
    assert parse_size(text, "x") == size


def test_sizes_format_back_readably() -> None:
    assert [format_size(n) for n in (100, 4 << 20, 3 << 29)] == ["100 B", "4 MiB", "1.5 GiB"]


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown-top-level-key",
        {"shufle": {}},
        "shufle: unknown key (did you mean 'shuffle'?); allowed keys are: adaptive, "
        "edge_rules, edges, failover, job, log_level, operators, parallelism, ray, shuffle, "
        "slots, spark, vertices",
    ),
    (
        "unknown-nested-key",
        {"shuffle": {"bufer_size": "1 MiB"}},
        "shuffle.bufer_size: unknown key (did you mean 'buffer_size'?); allowed keys are: "
        "batch_mode, buffer_size, checksums, credits, default_mode, memory_budget, service, "
        "spill_dir, wait_timeout",
    ),
    (
        "unknown-edge-key",
        {"edges": {"by_customer": {"mdoe": "blocking"}}},
        "edges.by_customer.mdoe: unknown key (did you mean 'mode'?); allowed keys are: "
        "keep, mode, partitions, service",
    ),
    (
        "wrong-edge-mode",
        {"edges": {"by_customer": {"mode": "pipelind"}}},
        "edges.by_customer.mode: 'pipelind' is not a mode; use one of: pipelined, blocking, "
        "hybrid-selective, hybrid-full",
    ),
    (
        "wrong-default-mode",
        {"shuffle": {"default_mode": "hybrid"}},
        "shuffle.default_mode: 'hybrid' is not a mode; use one of: pipelined, blocking, "
        "hybrid-selective, hybrid-full, auto",
    ),
    (
        "bad-size-string",
        {"shuffle": {"buffer_size": "4 MB/s"}},
        "shuffle.buffer_size: '4 MB/s' is not a size; write e.g. 4 MiB, 512MiB or 1048576",
    ),
    (
        "negative-size",
        {"shuffle": {"memory_budget": -5}},
        "shuffle.memory_budget: must be a positive size, got -5",
    ),
    ("zero-parallelism", {"parallelism": 0}, "parallelism: must be a positive integer, got 0"),
    (
        "bool-parallelism",
        {"parallelism": True},
        "parallelism: must be a positive integer, got True",
    ),
    ("string-slots", {"slots": "four"}, "slots: must be a positive integer, got 'four'"),
    (
        "edge-not-a-mapping",
        {"edges": {"by_customer": "blocking"}},
        "edges.by_customer: must be a mapping like {mode: blocking}",
    ),
    (
        "edges-as-a-list",
        {"edges": ["by_customer"]},
        "edges: must be a mapping like {by_customer: {mode: blocking}}",
    ),
    (
        "keep-without-mode",
        {"edges": {"by_customer": {"keep": True, "partitions": 4}}},
        "edges.by_customer.keep: the edge sets no mode to keep; add a mode beside it (one of: "
        "pipelined, blocking, hybrid-selective, hybrid-full) or remove keep",
    ),
    (
        "keep-false-without-mode",
        {"edges": {"by_customer": {"keep": False}}},
        "edges.by_customer.keep: the edge sets no mode to keep; add a mode beside it (one of: "
        "pipelined, blocking, hybrid-selective, hybrid-full) or remove keep",
    ),
    (
        "keep-not-a-boolean",
        {"edges": {"by_customer": {"mode": "pipelined", "keep": "yes"}}},
        "edges.by_customer.keep: must be true or false, got 'yes'",
    ),
    (
        "prewarm-not-a-boolean",
        {"spark": {"prewarm": "on"}},
        "spark.prewarm: must be true or false, got 'on'",
    ),
    (
        "keep-as-a-number",
        {"edges": {"by_customer": {"mode": "pipelined", "keep": 1}}},
        "edges.by_customer.keep: must be true or false, got 1",
    ),
    (
        "zero-partitions",
        {"edges": {"to_sort": {"partitions": 0}}},
        "edges.to_sort.partitions: must be a positive integer or auto, got 0",
    ),
    (
        "buffer-larger-than-budget",
        {"shuffle": {"buffer_size": "64 MiB", "memory_budget": "16 MiB"}},
        "shuffle.buffer_size: 64 MiB is larger than shuffle.memory_budget 16 MiB; lower "
        "buffer_size or raise memory_budget",
    ),
    (
        "zero-credits",
        {"shuffle": {"credits": 0}},
        "shuffle.credits: must be an integer from 1 to 1024, got 0",
    ),
    (
        "zero-timeout",
        {"shuffle": {"wait_timeout": 0}},
        "shuffle.wait_timeout: must be a number of seconds from 0.001 (1 ms) to 86400 (1 day), "
        "got 0",
    ),
    (
        "tiny-object-store",
        {"ray": {"object_store_memory": "10 MiB"}},
        "ray.object_store_memory: 10 MiB is below the 80 MiB Ray accepts; raise it",
    ),
    (
        "empty-service",
        {"shuffle": {"service": ""}},
        "shuffle.service: must be a non-empty string, got ''",
    ),
    ("job-not-a-string", {"job": 5}, "job: must be the job's name as a string, got 5"),
    (
        "zero-threads",
        {"operators": {"threads": 0}},
        "operators.threads: must be a positive integer, got 0",
    ),
    (
        "negative-threads",
        {"operators": {"threads": -2}},
        "operators.threads: must be a positive integer, got -2",
    ),
    (
        "fractional-threads",
        {"operators": {"threads": 1.5}},
        "operators.threads: must be a positive integer, got 1.5",
    ),
    (
        "string-threads",
        {"operators": {"threads": "2"}},
        "operators.threads: must be a positive integer, got '2'",
    ),
    (
        "bool-threads",
        {"operators": {"threads": True}},
        "operators.threads: must be a positive integer, got True",
    ),
    (
        "shuffle-not-a-mapping",
        {"shuffle": "fast"},
        "shuffle: must be a mapping like {buffer_size: 4 MiB}",
    ),
]


@pytest.mark.parametrize(("raw", "message"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_is_one_sentence_naming_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert str(err.value) == message


def test_operators_default_to_one_thread() -> None:
    assert load_config(None).operators.threads == 1


def test_a_thread_count_and_memory_are_kept() -> None:
    config = load_config({"operators": {"threads": 2, "memory": "96 MiB"}})
    assert config.operators == OperatorsConfig(memory=96 << 20, threads=2)
    assert load_config(config) == config  # and survive revalidation
    floor = load_config({"operators": {"memory": "64 MiB"}})
    assert floor.operators.memory == OPERATORS_MIN_MEMORY == 64 << 20  # the floor is honoured


MEMORY_REFUSED = (
    "operators.memory: {size} is below 64 MiB, the smallest budget the engine can honour "
    "(DuckDB needs about 24 MiB to aggregate at all, and holds 20-25 MiB outside its limit, "
    "so a smaller figure would be exceeded by more than half); give at least 64 MiB"
)


@pytest.mark.parametrize("memory", ["8 MiB", "16 MiB", "63 MiB", 1024])
def test_an_operator_memory_below_the_floor_is_refused_naming_the_floor_and_why(
    memory: Any,
) -> None:
    """Issue 37: a budget the engine cannot honour is refused when loaded, in a file and
    in overrides alike, never raised to the floor behind the user's back."""
    size = format_size(parse_size(memory, "operators.memory"))
    with pytest.raises(ConfigError) as err:
        load_config({"operators": {"memory": memory}})
    assert str(err.value) == MEMORY_REFUSED.format(size=size)
    with pytest.raises(ConfigError, match=re.escape(MEMORY_REFUSED.format(size=size))):
        load_config(None).with_overrides(operators={"memory": memory})


KERNEL_REMOVED = (
    "operators.kernel: the key was removed: every operator runs on DuckDB now; "
    "delete it from the config"
)


@pytest.mark.parametrize("kernel", ["duckdb", "arrow", "velox", 1])
def test_the_removed_kernel_key_is_one_sentence_saying_to_delete_it(kernel: Any) -> None:
    """``operators.kernel`` was removed (every operator runs on DuckDB): a config that
    still sets it, to any value, is told so, in a file and in overrides alike."""
    with pytest.raises(ConfigError) as err:
        load_config({"operators": {"kernel": kernel, "threads": 2}})
    assert str(err.value) == KERNEL_REMOVED and err.value.args[0].count(". ") == 0
    with pytest.raises(ConfigError, match=re.escape(KERNEL_REMOVED)):
        load_config(None).with_overrides(operators={"kernel": kernel})


def test_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"config file '{path}' does not exist; check the path"


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("job: revenue\nedges:\n  by_customer: {mode: blocking\n")
    with pytest.raises(ConfigError, match=r"YAML syntax error at line \d"):
        load_config(path)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- job\n- revenue\n")
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        load_config(path)


def test_unknown_edge_is_named_with_the_job_and_its_edges() -> None:
    config = load_config({"job": "revenue", "edges": {"by_custmer": {"mode": "blocking"}}})
    with pytest.raises(ConfigError) as err:
        config.check_edges("revenue", ["to_sort", "by_customer"])
    assert str(err.value) == (
        "edges.by_custmer: no such edge in job 'revenue'; edges are: by_customer, to_sort. "
        "The plan may have changed with the data (Spark numbers its exchanges anew when it "
        "picks another join): match edges by what they are with edge_rules (match: {kind, "
        "keys, into}) instead of by name"
    )


def test_edges_apply_only_to_the_named_job() -> None:
    config = load_config({"job": "revenue"})
    assert config.applies_to("revenue") and not config.applies_to("other")
    assert load_config({}).applies_to("anything")


def test_unknown_shuffle_service_is_named() -> None:
    from hybrid_shuffle.shuffle.service import load_shuffle_service

    with pytest.raises(ConfigError, match=r"shuffle\.service: 'remote' is not a shuffle service"):
        load_shuffle_service("remote")
    with pytest.raises(ConfigError, match=r"shuffle\.service: cannot import 'nosuch\.mod:Factory'"):
        load_shuffle_service("nosuch.mod:Factory")


def test_a_key_given_twice_names_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("parallelism: 0\nslots: 2\nparallelism: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"config file '{path}' line 3: key 'parallelism' is given twice (first on line 1); keep one"
    )


def test_a_directory_is_not_a_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    assert str(err.value) == f"config file '{tmp_path}' is a directory; give the YAML file"


def test_spark_starts_without_a_prewarm_unless_asked() -> None:
    assert load_config(None).spark.prewarm is False
    assert load_config({"spark": {"prewarm": True}}).spark.prewarm is True


def test_the_drivers_class_archive_is_on_unless_turned_off() -> None:
    assert load_config(None).spark.jvm_archive is True
    assert load_config({"spark": {"jvm_archive": False}}).spark.jvm_archive is False
    with pytest.raises(ConfigError, match=r"spark\.jvm_archive: must be true or false, got 'no'"):
        load_config({"spark": {"jvm_archive": "no"}})


def test_spark_start_timeout_is_a_duration() -> None:
    assert load_config(None).spark.start_timeout == 600.0
    assert load_config({"spark": {"start_timeout": "2 min"}}).spark.start_timeout == 120.0
    with pytest.raises(ConfigError, match=r"spark\.start_timeout: 'soon' is not a duration"):
        load_config({"spark": {"start_timeout": "soon"}})


def test_spark_booleans_reach_spark_in_its_spelling() -> None:
    config = load_config({"spark": {"configs": {"spark.sql.adaptive.enabled": True}}})
    assert config.spark.configs["spark.sql.adaptive.enabled"] == "true"


# -- settings that would fail every job later, or silently do nothing -----------------------


@pytest.mark.parametrize("credits", [0, -1, 1025, 10**12, 2.5, True, "4"])
def test_credits_outside_one_to_1024_are_rejected_naming_the_range(credits: Any) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"shuffle": {"credits": credits}})
    assert str(err.value) == (
        f"shuffle.credits: must be an integer from 1 to 1024, got {credits!r}"
    )


@pytest.mark.parametrize("credits", [1, 4, 1024])
def test_credits_within_the_range_are_kept(credits: int) -> None:
    assert load_config({"shuffle": {"credits": credits}}).shuffle.credits == credits


@pytest.mark.parametrize(
    "timeout", [0, -5, 0.0005, 86401, float("inf"), float("nan"), "300", None, False]
)
def test_wait_timeout_outside_a_millisecond_to_a_day_is_rejected_naming_the_range(
    timeout: Any,
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"shuffle": {"wait_timeout": timeout}})
    assert str(err.value) == (
        "shuffle.wait_timeout: must be a number of seconds from 0.001 (1 ms) to 86400 (1 day), "
        f"got {timeout!r}"
    )


@pytest.mark.parametrize("timeout", [0.001, 0.5, 300, 86400])
def test_wait_timeout_within_the_range_is_kept(timeout: float) -> None:
    assert load_config({"shuffle": {"wait_timeout": timeout}}).shuffle.wait_timeout == timeout


@pytest.mark.parametrize("key", ["buffer_size", "memory_budget"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        ("0 MiB", "'0 MiB', which is 0 bytes"),
        ("0.0001 B", "'0.0001 B', which is 0 bytes"),
        (0.5, "0.5, which is 0 bytes"),
    ],
)
def test_sizes_that_are_or_round_to_zero_bytes_are_rejected(
    key: str, value: Any, shown: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"shuffle": {key: value}})
    assert str(err.value) == f"shuffle.{key}: must be a positive size, got {shown}"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_negative_slots_in_yaml_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", "slots: -1\n"))
    assert str(err.value) == "slots: must be a positive integer, got -1"


def test_zero_parallelism_in_yaml_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", "parallelism: 0\n"))
    assert str(err.value) == "parallelism: must be a positive integer, got 0"


def test_binary_config_file_is_rejected_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "picture.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"config file '{path}' is not UTF-8 text (byte 0x89 at offset 0); give a UTF-8 YAML file"
    )


def test_latin1_config_file_is_rejected_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("job: café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 0xe9 at offset 8\)"):
        load_config(path)


def test_config_file_with_control_characters_is_rejected_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"job: a\x00b\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"config file '{path}' is not YAML text (character #x0000 at position 6); give a UTF-8 "
        "YAML file"
    )


def test_utf8_config_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes("\ufeffjob: café\n".encode())
    assert load_config(path).job == "café"


def test_unreadable_config_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "c.yaml", "job: x\n")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"config file '{path}' cannot be read (Permission denied); check its permissions"
    )


# -- edges: and job: --------------------------------------------------------------------------


def test_every_unknown_edge_is_named_with_the_job_and_its_edges() -> None:
    config = load_config({"job": "revenue", "edges": {"a": {}, "by_customer": {}, "b": {}}})
    with pytest.raises(ConfigError) as err:
        config.check_job("revenue", ["to_sort", "by_customer"])
    assert str(err.value) == (
        "edges.a, edges.b: no such edges in job 'revenue'; edges are: by_customer, to_sort. "
        "The plan may have changed with the data (Spark numbers its exchanges anew when it "
        "picks another join): match edges by what they are with edge_rules (match: {kind, "
        "keys, into}) instead of by name"
    )


def test_known_edges_pass_the_job_check() -> None:
    config = load_config({"job": "revenue", "edges": {"to_sort": {"mode": "blocking"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config.check_job("revenue", ["to_sort", "by_customer"])
    assert config.edges_for("revenue") == {"to_sort": EdgeConfig("blocking", None)}


def test_edges_without_a_job_name_apply_to_every_job_and_are_checked() -> None:
    config = load_config({"edges": {"to_sort": {"mode": "blocking"}}})
    assert config.edges_for("any") == config.edges
    with pytest.raises(ConfigError, match=r"^edges\.to_sort: no such edge in job 'other'"):
        config.check_job("other", ["by_customer"])


def test_job_of_another_name_gets_one_warning_naming_both_names() -> None:
    config = load_config({"job": "revenue", "edges": {"by_customer": {"mode": "pipelined"}}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config.check_job("revnue", ["by_customer"])
        config.check_job("revnue", ["by_customer"])  # planned again: no second warning
    assert [w.category for w in caught] == [ConfigWarning]
    assert str(caught[0].message) == (
        "edges: the config's edges are for job 'revenue', so none of them applies to job "
        "'revnue'; name the job 'revenue' or set job: revnue"
    )
    assert config.edges_for("revnue") == {}


def test_job_of_another_name_without_edges_is_not_warned_about() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config({"job": "revenue"}).check_job("other", ["e"])


# -- overrides in code go through the same checks ---------------------------------------------


def test_overrides_are_validated_like_the_file() -> None:
    config = load_config({"job": "revenue"})
    with pytest.raises(ConfigError, match=r"^shuffle\.credits: must be an integer from 1 to 1024"):
        config.with_overrides(shuffle={"credits": 0})
    with pytest.raises(ConfigError, match=r"^shuffle\.wait_timeout: must be a number of seconds"):
        config.with_overrides(shuffle=ShuffleConfig(wait_timeout=0))
    with pytest.raises(ConfigError, match=r"^parallelism: must be a positive integer, got 0"):
        config.with_overrides(parallelism=0)
    with pytest.raises(ConfigError, match=r"^edges\.e\.mode: 'fast' is not a mode"):
        config.with_overrides(edges={"e": EdgeConfig("fast")})
    with pytest.raises(ConfigError, match=r"^shuffle\.buffer_size: 64 MiB is larger than"):
        config.with_overrides(shuffle={"buffer_size": "64 MiB", "memory_budget": "16 MiB"})
    with pytest.raises(ConfigError, match=r"^paralelism: unknown key; allowed keys are: adaptive"):
        config.with_overrides(paralelism=3)


def test_overrides_change_only_what_they_name() -> None:
    config = load_config({"job": "revenue", "slots": 2, "shuffle": {"credits": 8}})
    changed = config.with_overrides(shuffle={"memory_budget": "64 MiB"}, slots=None, edges={})
    assert changed.shuffle.memory_budget == 64 << 20 and changed.shuffle.credits == 8
    assert changed.slots is None and changed.job == "revenue" and dict(changed.edges) == {}
    assert config.with_overrides(job="other").job == "other"


def test_a_hand_built_config_is_validated_when_loaded() -> None:
    with pytest.raises(ConfigError, match=r"^shuffle\.credits: must be an integer from 1 to"):
        load_config(Config(shuffle=ShuffleConfig(credits=10**12)))


def test_a_valid_config_survives_revalidation_unchanged() -> None:
    config = load_config(ROOT / "configs" / "quickstart.yaml").with_overrides(
        ray={"num_cpus": 2}, spark={"configs": {"spark.x": True}}
    )
    assert load_config(config) == config
    assert config.with_overrides() == config
    assert config.spark.configs == {"spark.x": "true"}


def test_failover_takes_durations_with_units_and_names_a_bad_key() -> None:
    config = load_config(
        {"failover": {"max_attempts": 5, "backoff": "200 ms", "job_timeout": "2 min"}}
    )
    assert (config.failover.max_attempts, config.failover.backoff) == (5, 0.2)
    assert config.failover.job_timeout == 120.0
    assert load_config(config) == config  # a Config round-trips through validation
    assert load_config({}).failover.job_timeout is None
    with pytest.raises(ConfigError, match=r"^failover\.backoff: '1 fortnight' is not a duration"):
        load_config({"failover": {"backoff": "1 fortnight"}})
    with pytest.raises(ConfigError, match=r"^failover\.max_attempts: must be a positive integer"):
        load_config({"failover": {"max_attempts": 0}})
    with pytest.raises(ConfigError, match=r"^failover\.job_timeout: must be a number of seconds"):
        load_config({"failover": {"job_timeout": -1}})


def test_an_edge_may_name_its_own_shuffle_service() -> None:
    config = load_config({"edges": {"to_join": {"service": "external"}}})
    assert config.edge("to_join").service == "external"
    with pytest.raises(ConfigError, match=r"^edges\.to_join\.service: must be a non-empty"):
        load_config({"edges": {"to_join": {"service": ""}}})


def test_a_misspelt_service_is_named_with_its_key_path() -> None:
    from hybrid_shuffle.config import SERVICES
    from hybrid_shuffle.shuffle.service import BUILTIN_SERVICES

    assert tuple(BUILTIN_SERVICES) == SERVICES
    with pytest.raises(
        ConfigError,
        match=r"^edges\.to_join\.service: 'extrnal' is not a shuffle service \(did you mean "
        r"'external'\?\)",
    ):
        load_config({"edges": {"to_join": {"service": "extrnal"}}})
    with pytest.raises(ConfigError, match=r"^shuffle\.service: 'remote' is not a shuffle service"):
        load_config({"shuffle": {"service": "remote"}})
    assert load_config({"shuffle": {"service": "my.module:Factory"}}).shuffle.service


# -- edges.NAME.keep ---------------------------------------------------------------------------


def test_keep_is_read_beside_its_mode_and_defaults_to_false() -> None:
    config = load_config(
        {"edges": {"a": {"mode": "pipelined", "keep": True}, "b": {"mode": "blocking"}}}
    )
    assert config.edge("a") == EdgeConfig("pipelined", keep=True)
    assert config.edge("b").keep is False and EdgeConfig().keep is False
    unkept = load_config({"edges": {"a": {"mode": "pipelined", "keep": False}}})
    assert unkept.edge("a") == EdgeConfig("pipelined")


def test_keep_survives_revalidation_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "kept.yaml"
    path.write_text("edges:\n  a: {mode: hybrid-full, keep: true}\n  b: {partitions: 2}\n")
    config = load_config(path)
    assert load_config(config) == config and config.with_overrides() == config
    again = load_config({}).with_overrides(edges=config.edges)  # EdgeConfig values, as code gives
    assert again.edges == config.edges


def test_keep_without_a_mode_is_refused_in_code_too() -> None:
    with pytest.raises(ConfigError, match=r"^edges\.a\.keep: the edge sets no mode to keep"):
        load_config({}).with_overrides(edges={"a": EdgeConfig(keep=True)})
    with pytest.raises(ConfigError, match=r"^edges\.a\.keep: the edge sets no mode to keep"):
        load_config(Config(edges={"a": EdgeConfig(partitions=2, keep=True)}))
