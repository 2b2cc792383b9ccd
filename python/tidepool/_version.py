# The package's version. It must equal project(tidepool VERSION ...) in the
# top-level CMakeLists.txt, the one source of the version: configuring CMake
# fails when the two differ (python/CMakeLists.txt), and
# tests/python/package_test.py checks it against the file and the library.
# It is a literal here, not generated, so that `pip install ./python` needs
# nothing but this folder.
__version__ = "0.1.0"
