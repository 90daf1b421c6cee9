"""Rendering pages in a headless browser: which pages (``decide``), the browser (``browser``), and
what the browser may fetch (``guard``). The stage that uses them is ``crawler.stages.render``."""
