from rtp_course.cli import entry

entry()
