import sys

from rtp_course.cli import main

sys.exit(main())
