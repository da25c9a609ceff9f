from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.fleet.tables import CourtesyRules, WorkerScore, WorkerScoreRun

APP_CONFIG = AppConfig(
    app_name="fleet",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[WorkerScore, WorkerScoreRun, CourtesyRules],
    migration_dependencies=[],
    commands=[],
)
