#include "gdn.h"
#include <stdio.h>
int main(void) { printf("%s\n", gdn_version_string()); return 0; }
