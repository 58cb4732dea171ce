"""Shared test setup.

The engine's own tests (modules ``test_engine*``, ``test_models*``,
``test_tracer*``, and any module marked ``translation_validation``) run with
``SYMSHAPE_TRANSLATION_VALIDATION=1``: every program they trace is replayed
through Z3 by :mod:`validation.translation`, and an unsound engine step fails
the test with the step and a counterexample.
"""
import pytest

_VALIDATED_MODULES = ("test_engine", "test_models", "test_tracer")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "translation_validation: trace with SYMSHAPE_TRANSLATION_VALIDATION=1 in this module")


@pytest.fixture(autouse=True, scope="module")
def _translation_validation_for_engine_tests(request):
    # Module scope, so module-scoped fixtures that trace (e.g. a traced GPT2)
    # are validated too: autouse fixtures are set up first within a scope.
    name = request.module.__name__.rsplit(".", 1)[-1]
    marks = getattr(request.module, "pytestmark", [])
    if not isinstance(marks, (list, tuple)):
        marks = [marks]  # pytest allows a single mark
    marked = any(m.name == "translation_validation" for m in marks)
    if not (name.startswith(_VALIDATED_MODULES) or marked):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYMSHAPE_TRANSLATION_VALIDATION", "1")
        yield


#: Known gaps found when the branches of this session were merged: each test still runs and
#: reports XPASS once fixed.  Listed here, in one place, so none hides; the closing note and the
#: issues name them.
KNOWN_GAPS = {
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = KNOWN_GAPS.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"known gap: {reason}", strict=False))
