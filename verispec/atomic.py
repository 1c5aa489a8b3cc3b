"""The atomic writer for the CLI: re-exported from :mod:`reference.atomic`, the one definition."""

from verispec.reference.atomic import FOLLOW_SYMLINKS_ENV as FOLLOW_SYMLINKS_ENV
from verispec.reference.atomic import check_target as check_target
from verispec.reference.atomic import output_file as output_file
from verispec.reference.atomic import replace_directory as replace_directory
from verispec.reference.atomic import replace_file as replace_file
from verispec.reference.errors import OutputError as OutputError
