from pathlib import Path

from piccolo.conf.apps import AppConfig

from appliance.billing.tables import (
    ClosedPeriod,
    ConnectedAccount,
    Invoice,
    Payout,
    Price,
    Statement,
    StatementLine,
    StripeCustomer,
    TurnCursor,
    UsageEntry,
)

APP_CONFIG = AppConfig(
    app_name="billing",
    migrations_folder_path=str(Path(__file__).parent / "piccolo_migrations"),
    table_classes=[
        UsageEntry,
        Price,
        ClosedPeriod,
        Statement,
        StatementLine,
        Invoice,
        Payout,
        StripeCustomer,
        ConnectedAccount,
        TurnCursor,
    ],
    # fleet: its first migration takes over the worker scores billing used to keep.
    migration_dependencies=["appliance.accounts.piccolo_app", "appliance.fleet.piccolo_app"],
    commands=[],
)
