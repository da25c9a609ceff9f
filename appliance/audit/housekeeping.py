"""The daily prune of entries past the admin's retention."""

from appliance.audit.service import prune
from appliance.scheduler import PeriodicJob

JOBS = [PeriodicJob("audit.prune", prune, "interval", {"hours": 6})]
