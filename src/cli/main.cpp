#include "wallfacer/wallfacer.h"
int main() { return 0; }
