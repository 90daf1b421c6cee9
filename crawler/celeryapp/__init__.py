"""The Celery layer: the app and its configuration (``app``), the tasks that carry stage
messages between workers (``tasks``), the dispatcher's worker bootstep (``bootsteps``), worker
signal handlers (``signals``) and the locked beat scheduler (``beat``).

Nothing below this package imports it (``make lint`` checks): the domain runs without Celery.
This file imports nothing, so ``crawler.celeryapp.config`` stays light for the command line.
"""
