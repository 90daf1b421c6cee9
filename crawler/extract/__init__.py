"""What a page says beyond its links: its main text (trafilatura) and which of its links are
navigation noise. Pure building blocks: no Redis, no Celery, no I/O."""

from crawler.extract.maintext import MainText, NoText, extract_main_text, main_text

__all__ = ["MainText", "NoText", "extract_main_text", "main_text"]
