from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.audit.tables import AuditChain, AuditEntry

APP_CONFIG = AppConfig(
    app_name="audit",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[AuditEntry, AuditChain],
    migration_dependencies=[],
    commands=[],
)
