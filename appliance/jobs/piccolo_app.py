from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.jobs.tables import (
    Job,
    Run,
    RunCheckpoint,
    RunLog,
    RunOutput,
    RunParameter,
    RunTask,
    SandboxPolicy,
    SchedulingRules,
)

APP_CONFIG = AppConfig(
    app_name="jobs",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[Job, Run, RunTask, RunLog, RunOutput, RunParameter, RunCheckpoint, SandboxPolicy, SchedulingRules],
    migration_dependencies=[],
    commands=[],
)
