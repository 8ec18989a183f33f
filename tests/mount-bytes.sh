exit 77 # placeholder: being written
