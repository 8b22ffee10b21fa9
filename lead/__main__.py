import sys

from collie.lead.daemon import main

sys.exit(main(sys.argv[1:]))
