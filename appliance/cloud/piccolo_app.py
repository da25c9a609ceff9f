from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.cloud.tables import CloudSettings

APP_CONFIG = AppConfig(
    app_name="cloud",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[CloudSettings],
    migration_dependencies=["appliance.accounts.piccolo_app"],
    commands=[],
)
