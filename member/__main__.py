import sys

from member.daemon import main

sys.exit(main(sys.argv[1:]))
