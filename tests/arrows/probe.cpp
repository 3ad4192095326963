// A probe of one arrow between parts (tests/arrows/CMakeLists.txt): compiled with exactly what
// the sources of one part see, it includes one header of another part. It builds when the part
// lists that part (src/<part>/CMakeLists.txt), and must fail to build when it does not.
#include KJIT_ARROW_HEADER
