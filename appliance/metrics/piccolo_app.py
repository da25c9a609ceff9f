from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.metrics.tables import AccountSample, FleetSample, MetricsAccess

APP_CONFIG = AppConfig(
    app_name="metrics",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[FleetSample, MetricsAccess, AccountSample],
    migration_dependencies=[],
    commands=[],
)
