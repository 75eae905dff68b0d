"""Which browser the site test drives, and what happens without one (skip, or fail under CI)."""

import pytest

import test_site_browser as site_test


@pytest.fixture
def no_browser(monkeypatch, tmp_path):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-chromium"))


def test_chromium_variable_wins(monkeypatch, tmp_path):
    fake = tmp_path / "chromium"
    fake.touch()
    monkeypatch.setenv("CHROMIUM", str(fake))
    assert site_test.find_chromium() == fake


def test_without_a_browser_the_test_is_skipped_with_how_to_enable_it(no_browser, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        site_test.require_chromium()


def test_without_a_browser_under_ci_the_test_fails(no_browser, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        site_test.require_chromium()
