"""Entry point of the one-file executable: the `peermr` command."""

from appliance.cli import main

if __name__ == "__main__":
    main()
