"""Upload's run state (walctl/pipeline/upload/state.py): the options as given, and what a new pass
starts from before its first step (issue 32: each of the module's mutants killed here)."""

from __future__ import annotations

import dataclasses

import pytest

from walctl.pipeline.upload.plan import UploadResult
from walctl.pipeline.upload.state import Options, UploadRun


def _options(**kw):
    base = dict(namespace="ns", block_size=4096, split_size=1 << 20, trim=True, dry_run=False, accept_gaps=(),
                progress=None, trim_timeout_s=30.0, max_bytes=None)
    base.update(kw)
    return Options(**base)


def test_options_are_frozen_and_salvage_is_off_by_default():
    opts = _options()
    assert opts.salvage is False
    assert [f.name for f in dataclasses.fields(Options)] == [
        "namespace", "block_size", "split_size", "trim", "dry_run", "accept_gaps", "progress", "trim_timeout_s",
        "max_bytes", "salvage"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.trim = False
    assert _options(salvage=True).salvage is True


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_new_run_holds_its_inputs_and_nothing_of_a_scan_yet(dry_run):
    opts, spools, dev = _options(dry_run=dry_run), object(), object()
    u = UploadRun("/w", "STORE", opts, spools, None, dev, 12.5)
    assert (u.wal_path, u.store, u.opts, u.spools, u.live, u.dev, u.started) == ("/w", "STORE", opts, spools, None,
                                                                                 dev, 12.5)
    assert u.result == UploadResult(dry_run=dry_run) and u.result.dry_run is dry_run
    assert u.header is None and u.doc is None and u.mark is None and u.scan is None and u.records is None
    assert u.last_mark is None and u.state is None and u.node_key == ""
    assert u.findings == [] and u.streams == {} and u.after_gaps == [] and u.plan == [] and u.damage == []
    assert type(u.streams) is dict and type(u.findings) is list
    assert UploadRun("/w", "S", opts, None, True, dev, 0.0).live is True


def test_each_run_has_its_own_lists():
    opts = _options()
    a, b = UploadRun("/w", "S", opts, None, None, None, 0.0), UploadRun("/w", "S", opts, None, None, None, 0.0)
    a.findings.append(1), a.after_gaps.append(1), a.plan.append(1), a.damage.append(1)
    a.streams[1] = 1
    assert (b.findings, b.after_gaps, b.plan, b.damage, b.streams) == ([], [], [], [], {})
