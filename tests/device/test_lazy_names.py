"""walctl.device's and walctl.cli's names load their module on first use (walctl.lazynames)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from walctl.lazynames import module_getattr


def test_a_name_loads_its_module_once_and_an_unknown_name_is_an_attribute_error():
    namespace: dict = {}
    getattr_ = module_getattr("walctl.device", {"lock_holder": "locks"}, namespace)
    from walctl.device.locks import lock_holder

    assert getattr_("lock_holder") is lock_holder and namespace == {"lock_holder": lock_holder}
    with pytest.raises(AttributeError, match="'walctl.device' has no attribute 'nope'"):
        getattr_("nope")


def test_importing_the_packages_loads_no_sub_module_until_a_name_is_used():
    code = ("import sys, walctl.device, walctl.cli; before = 'walctl.device.locks' in sys.modules; "
            "walctl.device.lock_holder; print(before, 'walctl.device.locks' in sys.modules, "
            "'walctl.cli.app' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False"]
