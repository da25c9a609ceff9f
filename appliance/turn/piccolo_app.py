from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.turn.tables import PeerRules, RelayUsage

APP_CONFIG = AppConfig(
    app_name="turn",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[RelayUsage, PeerRules],
    migration_dependencies=[],
    commands=[],
)
