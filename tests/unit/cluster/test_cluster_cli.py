"""``fabricsched cluster up|down`` argument handling and errors that need no binaries."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fabricsched.cluster import commands


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabricsched")
    commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_up_parses_dir_and_nodes() -> None:
    args = _parse("cluster", "up", "--dir", "c", "--nodes", "n.yaml")
    assert (args.dir, args.nodes) == (Path("c"), Path("n.yaml"))


def test_up_requires_a_dir() -> None:
    with pytest.raises(SystemExit):
        _parse("cluster", "up")


def test_a_bad_nodes_file_exits_non_zero_with_the_problem_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "nodes.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {}\nstatus: {capacity: {cpu: '1'}}\n")
    args = _parse("cluster", "up", "--dir", str(tmp_path / "c"), "--nodes", str(bad))
    assert args.handler(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("fabricsched cluster up: error: ")
    assert f"{bad}: document 1: missing metadata.name" in err
    assert not (tmp_path / "c").exists()


def test_down_without_a_recorded_cluster_is_a_no_op(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("cluster", "down", "--dir", str(tmp_path))
    assert args.handler(args) == 0
    assert "nothing to stop" in capsys.readouterr().out


def test_gpu_resources_are_repeatable_and_default_to_nvidia() -> None:
    args = _parse("cluster", "up", "--dir", "c", "--gpu-resource", "amd.com/gpu",
                  "--gpu-resource", "nvidia.com/gpu")
    assert args.gpu_resources == ["amd.com/gpu", "nvidia.com/gpu"]
    assert _parse("cluster", "up", "--dir", "c").gpu_resources is None


def test_a_bad_gpu_resource_name_exits_non_zero_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("cluster", "up", "--dir", str(tmp_path / "c"), "--gpu-resource", "gpu")
    assert args.handler(args) == 1
    assert "not an extended resource name like nvidia.com/gpu: 'gpu'" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
