"""``python -m coddl.elastic SPEC_JSON``: run one worker from a JSON WorkerSpec (a cold start)."""

from coddl.elastic.worker import main

main()
