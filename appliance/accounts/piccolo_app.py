from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.accounts.tables import ApiToken, EnrolmentLink, LoginFailure, Session, User

APP_CONFIG = AppConfig(
    app_name="accounts",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[User, Session, ApiToken, EnrolmentLink, LoginFailure],
    migration_dependencies=[],
    commands=[],
)
