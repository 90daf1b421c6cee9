"""Spiders the tests run in real workers (imported by name, as ``tests.spiders.flaky:FlakySpider``)."""
