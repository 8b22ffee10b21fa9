import sys

from collie.member.daemon import main

sys.exit(main(sys.argv[1:]))
