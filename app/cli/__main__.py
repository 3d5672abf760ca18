"""`python -m app.cli`: what `ragline submit` runs as a job's entrypoint."""

from app.cli import main

main()
