import sys

from lead.daemon import main

sys.exit(main(sys.argv[1:]))
