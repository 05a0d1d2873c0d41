"""Patch managers (the fallback, and MindSpeed's where installed): wrappers stack over one replacement,
imported names are rebound, removal undoes."""
import sys
import types

import pytest

from mindspeed_mm_fcp.mindspeed_fallback import MindSpeedPatchesManager as FallbackPatchesManager
from mindspeed_managers import PATCH_MANAGERS


@pytest.fixture(params=PATCH_MANAGERS)
def manager(request):
    yield request.param
    request.param.remove_patches()
    request.param.patches_info.clear()  # MindSpeed keeps emptied entries with the originals of this test's module


@pytest.fixture()
def target_module():
    module = types.ModuleType("fcp_patch_target")

    def add(a, b):
        return a + b

    class Greeter:
        def hello(self):
            return "hello"

    module.add, module.Greeter = add, Greeter
    consumer = types.ModuleType("fcp_patch_consumer")
    consumer.add = add  # as if it did `from fcp_patch_target import add`
    sys.modules[module.__name__], sys.modules[consumer.__name__] = module, consumer
    yield module, consumer
    del sys.modules[module.__name__], sys.modules[consumer.__name__]


def test_wrapper_wraps_and_replacement_replaces(target_module, manager):
    module, consumer = target_module
    original_add = module.add

    def add_wrapper(fn):
        def wrapped(a, b):
            return 10 * fn(a, b)
        return wrapped

    def hello(self):
        return "patched"

    manager.register_patch("fcp_patch_target.add", add_wrapper)
    manager.register_patch("fcp_patch_target.Greeter.hello", hello)
    manager.apply_patches()
    assert module.add(1, 2) == 30
    assert consumer.add(1, 2) == 30, "names imported elsewhere must see the patch"
    assert module.Greeter().hello() == "patched"

    manager.apply_patches()  # applying twice must not wrap twice
    assert module.add(1, 2) == 30

    manager.remove_patches()
    assert module.add is original_add and consumer.add is original_add
    if manager is FallbackPatchesManager:  # MindSpeed's removal restores module attributes only
        assert module.Greeter().hello() == "hello"


def test_conflicting_registration_needs_force(target_module, manager):
    manager.register_patch("fcp_patch_target.add", lambda a, b: 0)
    with pytest.raises(RuntimeError, match=r"the patch of (fcp_patch_target\.)?add exist"):
        manager.register_patch("fcp_patch_target.add", lambda a, b: 1)
    manager.register_patch("fcp_patch_target.add", lambda a, b: 1, force_patch=True)
    manager.apply_patches()
    assert target_module[0].add(5, 5) == 1


def test_fallback_names_an_unknown_target(target_module):
    FallbackPatchesManager.register_patch("fcp_patch_target.missing", lambda: None)
    with pytest.raises(AttributeError, match="fcp_patch_target.missing"):
        FallbackPatchesManager.apply_patches()
    FallbackPatchesManager.patches_info.clear()
    FallbackPatchesManager.register_patch("no_such_package_xyz.mod.fn", lambda: None)
    with pytest.raises(ModuleNotFoundError, match="no_such_package_xyz"):
        FallbackPatchesManager.apply_patches()
    FallbackPatchesManager.patches_info.clear()


def test_wrappers_stack_over_the_replacement_in_registration_order(target_module, manager):
    """MindSpeed stacks every wrapper of a target (FCP's and other features'); the fallback must too."""
    module, consumer = target_module

    def first_wrapper(fn):
        return lambda a, b: fn(a, b) + 1

    def second_wrapper(fn):
        return lambda a, b: fn(a, b) * 10

    manager.register_patch("fcp_patch_target.add", lambda a, b: a * b)
    manager.register_patch("fcp_patch_target.add", first_wrapper)
    manager.register_patch("fcp_patch_target.add", second_wrapper)
    manager.register_patch("fcp_patch_target.add", first_wrapper)  # the same wrapper again counts once
    manager.apply_patches()
    assert module.add(2, 3) == 70 and consumer.add(2, 3) == 70


def test_removal_leaves_the_replacement_in_its_own_module(target_module):
    """The fallback's removal keeps a replacement in the module that defines it under the patched name
    (MindSpeed's own removal resets every module outside ``mindspeed`` that holds it)."""
    module, consumer = target_module
    manager = FallbackPatchesManager
    original_add = module.add
    provider = types.ModuleType("fcp_patch_provider")

    def add(a, b):
        return a - b

    provider.add = add
    sys.modules[provider.__name__] = provider
    try:
        for _ in range(2):  # apply, remove, and apply again
            manager.register_patch("fcp_patch_target.add", provider.add)
            manager.apply_patches()
            assert module.add(5, 3) == 2 and consumer.add(5, 3) == 2
            manager.remove_patches()
            assert module.add is original_add and consumer.add is original_add
            assert provider.add is add
    finally:
        del sys.modules[provider.__name__]
