from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.pmrfs.tables import Blob, Bucket, ObjectBlob, Replica, StoredObject

APP_CONFIG = AppConfig(
    app_name="pmrfs",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[Bucket, StoredObject, Blob, ObjectBlob, Replica],
    migration_dependencies=["appliance.accounts.piccolo_app"],
    commands=[],
)
