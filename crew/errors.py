"""The one error tree of Collie.

    CollieError                 any failure we report to a person (never a traceback)
    ├── UsageError              the command line is wrong: usage and exit 2
    ├── ConfigError             sources.json / .env / crew.json is wrong: names the entry and field
    └── NotRunningError         the CLI needs the running bridge and none answers

Every message says what to do. Exit statuses live here so the CLI and the daemon agree.
"""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CONFIG = 78  # sysexits EX_CONFIG: the bridge refused to start on a bad config
EXIT_RUNNING = 75  # sysexits EX_TEMPFAIL: another bridge already runs on this state folder
# The exits a restart cannot fix: the service unit does not restart on them (RestartPreventExitStatus).
NO_RESTART = (EXIT_USAGE, EXIT_RUNNING, EXIT_CONFIG)


class CollieError(Exception):
    exit_status = EXIT_FAILURE


class UsageError(CollieError):
    exit_status = EXIT_USAGE


class ConfigError(CollieError):
    exit_status = EXIT_CONFIG


class NotRunningError(CollieError):
    exit_status = EXIT_FAILURE
