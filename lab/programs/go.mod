module stockade.lab/programs

go 1.25
