"""Our checker gives porcupine's verdicts on porcupine's own test histories (tests/fixtures/porcupine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soak.linear.checker import ILLEGAL, OK, check
from soak.linear.kv_model import CasRegisterModel, KvModel
from soak.linear.porcupine_logs import parse_file, parse_jepsen, parse_kv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "porcupine"

# porcupine_test.go: TestKv1ClientOk/Bad, TestEtcdJepsen000/002/100
EXPECTED = {"c01-ok.txt": OK, "c01-bad.txt": ILLEGAL, "etcd_000.log": ILLEGAL, "etcd_002.log": OK,
            "etcd_100.log": OK}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_agrees_with_porcupine(name: str) -> None:
    path = FIXTURES / name
    model = CasRegisterModel() if path.suffix == ".log" else KvModel()
    result = check(model, parse_file(path), budget_s=20.0, reduce_budget_s=1.0)
    assert result.verdict == EXPECTED[name]
    if result.verdict == ILLEGAL:
        assert result.failing and len(result.failing) <= len(result.failing_partition)
        assert check(model, result.failing, budget_s=5.0).verdict == ILLEGAL


def test_jepsen_info_is_pending_forever_and_timed_out_read_returns() -> None:
    ops = parse_jepsen("INFO  jepsen.util - 0\t:invoke\t:write\t1\n"
                       "INFO  jepsen.util - 1\t:invoke\t:read\tnil\n"
                       "INFO  jepsen.util - 1\t:fail\t:read\t:timed-out\n"
                       "INFO  jepsen.util - 0\t:info\t:write\t:timed-out\n"
                       "INFO  jepsen.util - 2\t:invoke\t:cas\t[1 2]\n"
                       "INFO  jepsen.util - 2\t:fail\t:cas\t[1 2]\n")
    write, read, cas = ops
    assert write.unknown and write.output is None
    assert read.ret == 3.0 and read.output is None
    assert cas.output == {"ok": False} and cas.ret == 6.0
    # cas failed, so the write had not taken effect by then: it may still, later (or never).
    assert check(CasRegisterModel(), ops).verdict == OK


def test_kv_parse_reads_porcupine_lines() -> None:
    ops = parse_kv('{:process 0, :type :invoke, :f :put, :key "6", :value "a"}\n'
                   '{:process 0, :type :ok, :f :put, :key "6", :value "a"}\n'
                   '{:process 1, :type :invoke, :f :get, :key "6", :value nil}\n'
                   '{:process 1, :type :ok, :f :get, :key "6", :value "b"}\n')
    assert [op.input for op in ops] == [{"op": "put", "key": "6", "value": "a"}, {"op": "get", "key": "6"}]
    assert check(KvModel(), ops).verdict == ILLEGAL
