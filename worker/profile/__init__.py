"""Reading a device profile (ETDumps, with the bundle's ETRecords) into where the time goes; needs torch."""
