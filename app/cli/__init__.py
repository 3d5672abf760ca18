"""`ragline`: the command line. Loads config once, connects to Ray where a command needs it, prints results
(tables for people, `--json` for machines). Errors reach the user in one place, `main`, by their type
(`app.errors`): a one-line reason and an exit status saying whose move it is (2: the input is wrong, 3: try again
later, 1: the run failed), never a traceback; anything else is a bug and shows its traceback.

One module per command group: `ingest`, `index` (index build, search), `serve` (serve, query, status), `train`,
`models`, `eval`, `adapt`, `submit`, `keys`, `demo`; `context` (config, storage, Ray) and `render` (output) serve
them all."""

from __future__ import annotations

import sys

import typer

from app.cli import adapt, demo, index, ingest, keys, models, serve, submit, train
from app.cli import eval as evaluation  # the module, not the builtin
from app.cli.context import main_options
from app.cli.render import fail
from app.errors import RaglineError
from app.train.tasks import TASKS

app = typer.Typer(help="Ragline: documents to grounded answers on Ray.", no_args_is_help=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None)
index_app = typer.Typer(help="Index versions.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluation.", no_args_is_help=True)
train_app = typer.Typer(help="Fine-tuning runs on Ray Train.", no_args_is_help=True)
models_app = typer.Typer(help="Trained model versions in the catalog.", no_args_is_help=True)
submit_app = typer.Typer(help="Run ingest, train or eval as a Ray job on a running cluster (Ray Jobs API): the "
                         "working directory is uploaded, the job's logs stream here and the exit status is the "
                         "job's.", no_args_is_help=True)
app.add_typer(index_app, name="index")
app.add_typer(eval_app, name="eval")
app.add_typer(train_app, name="train")
app.add_typer(models_app, name="models")
app.add_typer(submit_app, name="submit")
adapt_app = typer.Typer(invoke_without_command=True)  # its help is `adapt.adapt`'s
app.add_typer(adapt_app, name="adapt")
keys_app = typer.Typer(help="API keys of the HTTP endpoint and the collections each may read.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.callback()(main_options)

# in the order `ragline --help` lists them
app.command()(ingest.ingest)
app.command()(ingest.delete)
index_app.command("build")(index.index_build)
app.command()(index.search)
app.command()(serve.status)
app.command()(serve.serve)
app.command()(serve.query)
for _task in TASKS.values():  # one command per registered task
    train_app.command(_task.name)(train.train_command(_task.name, _task.summary))
train_app.command("status")(train.train_status)
adapt_app.callback()(adapt.adapt)
adapt_app.command("questions")(adapt.adapt_questions)
models_app.command("list")(models.models_list)
models_app.command("promote")(models.models_promote)
eval_app.command("retrieval")(evaluation.eval_retrieval)
eval_app.command("answers")(evaluation.eval_answers)
eval_app.command("corpus")(evaluation.eval_corpus)
for _name, _doc in submit.COMMANDS.items():
    submit_app.command(_name, context_settings={"ignore_unknown_options": True}, no_args_is_help=True)(
        submit.submit_command(_name, _doc))
keys_app.command("create")(keys.keys_create)
keys_app.command("list")(keys.keys_list)
keys_app.command("revoke")(keys.keys_revoke)
app.command()(demo.demo)


def main() -> None:
    """The `ragline` entry point: runs the command and maps what escapes it to an exit status and one line."""
    from pydantic import ValidationError
    from ray.exceptions import RayError

    try:
        app()
    except RayError as e:  # a task, actor or node of the run failed on the cluster (a node lost, say)
        first = (str(e).strip() or type(e).__name__).splitlines()[0]
        sys.exit(fail(f"the run failed on the cluster: {first}. Nothing half-done is published (a version "
                      "appears only when its run completes; training resumes from its latest checkpoint): run the "
                      "command again", 1))
    except RaglineError as e:  # its message says what to do, its class whose move it is
        sys.exit(fail(str(e), e.exit_code))
    except ValidationError as e:  # a model made from the caller's input refused it
        sys.exit(fail(str(e), 2))
    except KeyboardInterrupt:
        sys.exit(fail("interrupted (a training run resumes from its latest checkpoint when started again with "
                      "the same name)", 130))
