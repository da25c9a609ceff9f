from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.cluster.tables import Installation, Leader

APP_CONFIG = AppConfig(
    app_name="cluster",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[Leader, Installation],
    migration_dependencies=[],
    commands=[],
)
